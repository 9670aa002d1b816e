"""Cells scored on posgen_prose: each cell the first ``limit`` documents scored by the
model's own ``loglikelihood_rolling`` (lm-eval's rolling windows, as ``posgen run`` scores
the task) under one model-side perturbation, written to its folder as soon as it is
scored. ``posgen layers`` and ``posgen cause`` score their cells here.

With the model's prefix reuse (:class:`posgen.harness.model_side.prefix_reuse.PrefixReuse`)
the plain cell keeps every decoder layer's output, and a cell whose first perturbed layer
is L runs only layers L.. .
"""

from __future__ import annotations

import contextlib
import re
import sys
import time
from collections.abc import Callable
from typing import Any, Protocol, TextIO

from posgen.tasks.offline import load_rows

TASK = "posgen_prose"


class CellFolder(Protocol):
    """Where cells are written: a run folder of ``posgen layers`` or ``posgen cause``."""

    def has_cell(self, cell: str) -> bool: ...

    def write_cell(self, cell: str, record: dict[str, Any]) -> None: ...


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


def score_cells(
    folder: CellFolder,
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
