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

Then the decomposition of the same weights (``posgen decompose``'s pipeline, the step
``posgen run`` takes too: :mod:`posgen.harness.loaded_model.model`), and the scores (:mod:`posgen.results.scores.layers`) and report (:mod:`posgen.results.report.layers`).
Every cell is written as soon as it is scored; a rerun skips the ones already there.
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import Callable
from typing import Any, TextIO

from posgen.harness.hf_posgen.prefix_reuse import PrefixReuse
from posgen.harness.layers.folder import LayersFolder
from posgen.harness.loaded_model.model import load_entry_lm, write_decomposition
from posgen.tasks.offline import load_rows

TASK = "posgen_prose"


def prose_documents(limit: int) -> list[dict[str, Any]]:
    """The first ``limit`` posgen_prose documents (lm-eval's ``--limit`` takes the first)."""

    return load_rows(f"{TASK}.jsonl")[:limit]


def word_count(text: str) -> int:
    """Words as lm-eval's rolling tasks count them (``word_perplexity``'s weight)."""
    return len(re.split(r"\s+", text))


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
    schemes = {"positions": cfg.positions, "features": cfg.features, "seed": cfg.seed}
    cells = [
        (c.name, None if c.plain else {**schemes, "layers": c.layers, "heads": c.heads})
        for c in cfg.cells()
    ]
    return score_cells(folder, lm, cells, cfg.limit, cfg.seed, progress, log)


def score_cells(
    folder: LayersFolder,
    lm: Any,
    cells: list[tuple[str, dict[str, Any] | None]],
    limit: int,
    seed: int,
    progress: Callable[[str], None] | None = None,
    log: TextIO | None = None,
) -> dict[str, float]:
    """Score the unfinished ``cells`` of ``folder`` in order: each a name and the keyword
    arguments of ``lm.set_perturbation`` (None: the plain model), on the first ``limit``
    posgen_prose documents with ``seed``; every cell is written as soon as it is scored
    (a line per cell, and one on the prefix reuse, to ``progress``). With
    ``lm.prefix_reuse`` the plain cell must come first (a resumed run records the plain
    layers once more, unwritten). Returns seconds per cell scored."""
    docs = prose_documents(limit)
    texts = [d["text"] for d in docs]
    timings: dict[str, float] = {}
    todo = [c for c in cells if not folder.has_cell(c[0])]
    reuse = lm.prefix_reuse
    if reuse is not None and todo and todo[0][1] is not None and len(todo) > 2:
        # resumed after the plain cell: one plain pass (not written) records the layers
        lm.set_perturbation(None, None, seed)
        with contextlib.redirect_stderr(log or sys.stderr):
            score_documents(lm, texts)
    for k, (cell, perturbation) in enumerate(todo, 1):
        lm.set_perturbation(**(perturbation or {"seed": seed}))
        start, cpu = time.perf_counter(), time.process_time()
        with contextlib.redirect_stderr(log or sys.stderr):
            ll = score_documents(lm, texts)
        timings[cell] = time.perf_counter() - start
        cpu = time.process_time() - cpu  # every thread of this process
        folder.write_cell(cell, _cell_record(cell, docs, ll, lm))
        if progress is not None:
            progress(f"{cell} ({k}/{len(todo)}) {timings[cell]:.1f} s ({cpu:.1f} CPU-s)")
    lm.set_perturbation(None, None, seed)
    if reuse is not None:
        if progress is not None and todo:
            progress(f"prefix reuse {reuse.note}")
        reuse.clear()
    return timings


def _cell_record(name: str, docs: list[dict], ll: list[float], lm: Any) -> dict[str, Any]:
    """What a cell file holds: per-document log-likelihoods, word and token counts, the
    perturbation as applied, and how the prefix reuse ran."""
    reuse = lm.prefix_reuse
    return {
        "cell": name,
        "documents": [d["doc_id"] for d in docs],
        "loglikelihood": ll,
        "words": [word_count(d["text"]) for d in docs],
        "tokens": [len(lm.tok_encode(d["text"])) for d in docs],  # the tokens predicted
        "perturbation": lm.perturbation.to_dict(),
        **({} if reuse is None else {"prefix_reuse": reuse.note}),
    }


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
            lm = load_entry_lm(cfg.model, cfg.batch_size, cfg.seed, device)
        lm.prefix_reuse = PrefixReuse(lm.model)
        timings = run_cells(folder, lm, progress, log)
        if need_fit:
            start = time.perf_counter()
            with contextlib.redirect_stderr(log):
                path = folder.decomposition_path
                write_decomposition(lm, cfg.model, cfg.decompose, cfg.seed, path)
            timings["decomposition"] = time.perf_counter() - start
    return timings
