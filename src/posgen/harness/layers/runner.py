"""Run the cells of ``posgen layers`` on one loaded model, then score and report.

Cells, each the posgen_prose documents scored by the model's own
``loglikelihood_rolling`` (lm-eval's rolling windows, as ``posgen run`` scores the task):

- ``plain``: no perturbation;
- ``layer-NNN``: the scheme in decoder layer NNN only (``hf-posgen`` ``layers=NNN``);
- ``all``: the scheme in every layer at once (the global path of ``posgen run``).

The plain cell is scored first and every decoder layer's output kept
(:class:`posgen.harness.hf_posgen.prefix_reuse.PrefixReuse`): a cell whose first perturbed
layer is L reuses layers 0..L−1 of the plain forward, bit for bit what they would compute,
and runs only layers L.. (checked once per run against a full forward).

Then the decomposition of the same weights (``posgen decompose``'s pipeline), and the
scores (:mod:`posgen.results.scores.layers`) and report (:mod:`posgen.results.report.layers`).
Every cell is written as soon as it is scored; a rerun skips the ones already there.
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, TextIO

from posgen.harness.decomposition.pipeline import decompose_model
from posgen.harness.hf_posgen.model import HFPosgenLM
from posgen.harness.hf_posgen.prefix_reuse import PrefixReuse
from posgen.harness.layers.folder import LayersFolder
from posgen.harness.loading import hflm_kwargs
from posgen.results.folder.layers_config import LayersConfig
from posgen.results.folder.store import atomic_write_parquet
from posgen.tasks.offline import load_rows

TASK = "posgen_prose"


def prose_documents(limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` posgen_prose documents (lm-eval's ``--limit`` takes the first)."""

    return load_rows(f"{TASK}.jsonl")[:limit]


def word_count(text: str) -> int:
    """Words as lm-eval's rolling tasks count them (``word_perplexity``'s weight)."""
    return len(re.split(r"\s+", text))


def load_lm(config: LayersConfig, device: str | None) -> Any:
    """The model as ``posgen run`` loads it: ``HFPosgenLM`` with the entry's loading
    options (:func:`posgen.harness.loading.hflm_kwargs`)."""
    entry = config.model
    return HFPosgenLM(
        pretrained=entry.path, batch_size=config.batch_size, **hflm_kwargs(entry, device)
    )


def score_documents(lm: Any, texts: list[str]) -> list[float]:
    """Summed log-likelihood of each text under the model's current perturbation."""
    from lm_eval.api.instance import Instance

    reqs = [Instance("loglikelihood_rolling", None, (t,), i) for i, t in enumerate(texts)]
    return [float(x) for x in lm.loglikelihood_rolling(reqs, disable_tqdm=True)]


def run_cells(
    folder: LayersFolder,
    lm: Any,
    progress: Callable[[str], None] | None = None,
    log: TextIO | None = None,
) -> dict[str, float]:
    """Score every unfinished cell of ``folder`` (lm-eval's own output into ``log``; a
    line per cell scored, and one on the prefix reuse, to ``progress``); returns seconds
    per cell scored."""
    cfg = folder.config
    docs = prose_documents(cfg.limit)
    texts = [d["text"] for d in docs]
    timings: dict[str, float] = {}
    todo = [c for c in cfg.cells() if not folder.has_cell(c.name)]
    reuse = lm.prefix_reuse
    if reuse is not None and todo and not todo[0].plain and len(todo) > 2:
        # resumed after the plain cell: one plain pass (not written) records the layers
        lm.set_perturbation(None, None, cfg.seed)
        with contextlib.redirect_stderr(log or sys.stderr):
            score_documents(lm, texts)
    for k, cell in enumerate(todo, 1):
        if cell.plain:
            lm.set_perturbation(None, None, cfg.seed)
        else:
            lm.set_perturbation(
                cfg.positions, cfg.features, cfg.seed, layers=cell.layers, heads=cell.heads
            )
        start, cpu = time.perf_counter(), time.process_time()
        with contextlib.redirect_stderr(log or sys.stderr):
            ll = score_documents(lm, texts)
        timings[cell.name] = time.perf_counter() - start
        cpu = time.process_time() - cpu  # every thread of this process
        folder.write_cell(cell.name, _cell_record(cell.name, docs, ll, lm))
        if progress is not None:
            progress(f"{cell.name} ({k}/{len(todo)}) {timings[cell.name]:.1f} s ({cpu:.1f} CPU-s)")
    lm.set_perturbation(None, None, cfg.seed)
    if reuse is not None:
        if progress is not None and todo:
            progress(f"prefix reuse {reuse.note}")
        reuse.clear()
    return timings


def _cell_record(name: str, docs: list[dict], ll: list[float], lm: Any) -> dict[str, Any]:
    """What a cell file holds: per-document log-likelihoods and word counts, the
    perturbation as applied, and how the prefix reuse ran."""
    reuse = lm.prefix_reuse
    return {
        "cell": name,
        "documents": [d["doc_id"] for d in docs],
        "loglikelihood": ll,
        "words": [word_count(d["text"]) for d in docs],
        "perturbation": lm.perturbation.to_dict(),
        **({} if reuse is None else {"prefix_reuse": reuse.note}),
    }


def decompose(folder: LayersFolder, lm: Any) -> Path:
    """The decomposition table of the loaded weights (``posgen decompose``'s pipeline)."""

    cfg = folder.config
    lm.set_perturbation(None, None, cfg.seed)
    table = decompose_model(
        lm.model,
        tokenizer=lm.tokenizer,
        docs=cfg.decompose.docs,
        tokens=cfg.decompose.tokens,
        seed=cfg.seed,
        progress=False,
    )
    table["model"] = cfg.model.label
    atomic_write_parquet(folder.decomposition_path, table)
    return folder.decomposition_path


def run(
    folder: LayersFolder, device: str | None, progress: Callable[[str], None] | None = None
) -> dict[str, float]:
    """Load once, score the unfinished cells, fit the decomposition if missing."""
    cfg = folder.config
    todo = [c for c in cfg.cells() if not folder.has_cell(c.name)]
    need_fit = cfg.decompose.docs > 0 and not folder.decomposition_path.is_file()
    if not todo and not need_fit:
        return {}
    log_path = folder.root / "lm_eval.log"
    with open(log_path, "a", encoding="utf-8") as log:
        with contextlib.redirect_stderr(log):  # transformers' and lm-eval's bars and notes
            lm = load_lm(cfg, device)
        lm.prefix_reuse = PrefixReuse(lm.model)
        timings = run_cells(folder, lm, progress, log)
        if need_fit:
            start = time.perf_counter()
            with contextlib.redirect_stderr(log):
                decompose(folder, lm)
            timings["decomposition"] = time.perf_counter() - start
    return timings
