"""Run the cells of ``posgen layers`` on one loaded model, then score and report.

Cells, each the posgen_prose documents scored by the model's own
``loglikelihood_rolling`` (lm-eval's rolling windows, as ``posgen run`` scores the task;
:mod:`posgen.harness.loaded_model.prose_cells`):

- ``plain``: no perturbation;
- ``layer-NNN``: the scheme in decoder layer NNN only (``hf-posgen`` ``layers=NNN``);
- ``all``: the scheme in every layer at once (the global path of ``posgen run``).

The plain cell is scored first and every decoder layer's output kept
(:class:`posgen.harness.model_side.prefix_reuse.PrefixReuse`): a cell whose first perturbed
layer is L reuses layers 0..L−1 of the plain forward, bit for bit what they would compute,
and runs only layers L.. (checked once per run against a full forward).

Then the decomposition of the same weights (``posgen decompose``'s pipeline, the step
``posgen run`` takes too: :mod:`posgen.harness.loaded_model.model`), and the scores (:mod:`posgen.results.scores.layers`) and report (:mod:`posgen.results.report.layers`).
Every cell is written as soon as it is scored; a rerun skips the ones already there.
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any, TextIO

from posgen.harness.loaded_model.model import load_entry_lm, write_decomposition
from posgen.harness.loaded_model.prose_cells import score_cells
from posgen.harness.model_side.prefix_reuse import PrefixReuse
from posgen.results.folder.layers_config import LayersFolder


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
