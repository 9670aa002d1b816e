"""The run: the perturbation sweep, the decomposition fit, scoring and the report.

For every model: one load, then one lm-eval evaluation per cell, each written to the run
folder as soon as it finishes (see :mod:`posgen.results.store`):

- the unperturbed baseline (rate 0), computed once per task and shared by every scheme
  (rate 0 of each scheme is the identity perturbation, checked, so this is exact);
- ``text``: words reordered in the documents (posgen's perturbed lm-eval tasks);
- ``position``: position indices perturbed inside the model (``hf-posgen``);
- ``feature``: RoPE noise of std σ inside the model (``hf-posgen``);

then the attention-logit decomposition of the same weights, then (``--random-init``) the
same for a seeded random-init twin of the architecture, and finally scores and the
report. Everything the results depend on is in the resolved config; a rerun with the
same config resumes, a different one into the same folder is refused.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

from posgen.harness.run.config import RunConfig
from posgen.harness.run.plan import plan_cells

__all__ = ["run_sweep"]


def run_sweep(store, device: str | None = None, progress: bool = True) -> dict[str, Path]:
    """Run every unfinished cell of ``store``'s config, then score and report."""
    from tqdm.auto import tqdm

    from posgen.harness.run.cells import ModelSession
    from posgen.results.report import regenerate

    config = RunConfig.from_dict(store.config)
    plans = {m.label: plan_cells(config, m) for m in config.models}
    units = [(m, c) for m in config.models for c in plans[m.label]]
    decomp = [m for m in config.models if config.decompose.docs > 0 and m.rope]
    done = sum(store.has_cell(m.label, c.cell_id) for m, c in units) + sum(
        store.decomposition_path(m.label).is_file() for m in decomp
    )
    bar = tqdm(
        total=len(units) + len(decomp),
        initial=done,
        desc="posgen run",
        disable=not progress,
        file=sys.stderr,
        dynamic_ncols=True,
    )
    for model in config.models:
        todo = [c for c in plans[model.label] if not store.has_cell(model.label, c.cell_id)]
        need_fit = model in decomp and not store.decomposition_path(model.label).is_file()
        if not todo and not need_fit:
            continue
        with ModelSession(store, config, model, device=device) as session:
            for cell in todo:
                bar.set_postfix_str(f"{_short(model.label)} {cell.cell_id}")
                session.evaluate(cell)
                bar.update()
            if need_fit:
                bar.set_postfix_str(f"{_short(model.label)} decomposition")
                session.decompose()
                bar.update()
    bar.set_postfix_str("scoring and report")
    paths = regenerate(store.root)
    bar.close()
    return paths


def _short(label: str) -> str:
    return re.sub(r".*/", "", label)[-28:]
