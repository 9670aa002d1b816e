"""The cells of a run config: what ``posgen run`` evaluates and what the scores expect.

One expansion of the sweep, read by the runner (:mod:`posgen.harness.run.sweep`) and by
the scores (:func:`posgen.results.scores.run.missing_cells`): per model and task the
unperturbed cell first, then every value of every scheme of every kind, per seed
(``seed, seed+1, ...``). Rate 0 of each scheme is the identity (checked), so it is the
shared baseline cell; a scheme whose 0 were not the identity would get its own rate-0
cell. A model without RoPE gets no model-side cells (:data:`MODEL_SIDE_KINDS`).

The evidence-depth cells (``config.depth``) follow, per depth task (its unperturbed cell
first when it is not one of the rate tasks): at each depth D the text form (kind
``text``, scheme ``depth``, the task ``perm_depth_<D>pct_<task>``) then the position form
(kind ``position``, ``positions=depth:D``), rate D. Depth 0 is a cell of its own (the
evidence first, not the identity); a depth move draws nothing, so one seed.
"""

from __future__ import annotations

from dataclasses import replace

from posgen.perturbations import Perturbation, registry
from posgen.results.folder.config import MODEL_SIDE_KINDS, Cell, ModelEntry, RunConfig
from posgen.results.folder.schema import rate_label
from posgen.tasks.naming import format_name


def plan_cells(config: RunConfig, model: ModelEntry | None = None) -> list[Cell]:
    """Every (task, perturbation) cell of ``model`` (of a RoPE model when None), the
    shared baseline first per task. Raises ``PerturbationError`` for a scheme or value
    the registry refuses."""
    cells = []
    seed = config.seed
    seeds = [seed + k for k in range(config.seeds)]
    for task in config.tasks:
        cells.append(_cell(task, task, "none", "none", 0.0, seed, None))
        for kind, axis in config.sweep.items():
            if model is not None and not model.model_side and kind in MODEL_SIDE_KINDS:
                continue
            for scheme in axis.schemes:
                for value in axis.values:
                    p = registry.parse(kind, f"{scheme}:{float(value)!r}")
                    if value == 0 and p.is_identity:
                        continue
                    for s in seeds:
                        lm_task = format_name(p, task, s) if kind == "text" else task  # type: ignore[arg-type]
                        cell = _cell(task, lm_task, kind, scheme, value, s, p)
                        if s != seed:  # the first seed keeps its old cell id
                            cell = replace(cell, cell_id=f"{cell.cell_id}_seed{s}")
                        cells.append(cell)
    return cells + _depth_cells(config, model)


def _depth_cells(config: RunConfig, model: ModelEntry | None) -> list[Cell]:
    """The evidence-depth cells of ``config.depth`` (none without it)."""
    if config.depth is None:
        return []
    cells = []
    for task in config.depth.tasks:
        if task not in config.tasks:
            cells.append(_cell(task, task, "none", "none", 0.0, config.seed, None))
        for depth in config.depth.depths:
            for kind in ("text", "position"):
                if kind == "position" and model is not None and not model.model_side:
                    continue
                p = registry.parse(kind, f"depth:{float(depth)!r}")
                lm_task = format_name(p, task, config.seed) if kind == "text" else task  # type: ignore[arg-type]
                cells.append(_cell(task, lm_task, kind, "depth", depth, config.seed, p))
    return cells


def _cell(
    task: str, lm_task: str, kind: str, scheme: str, value: float, seed: int, p: Perturbation | None
) -> Cell:
    cid = f"{task}__none" if kind == "none" else f"{task}__{kind}_{scheme}_{rate_label(value)}"
    return Cell(
        cell_id=cid,
        task=task,
        lm_eval_task=lm_task,
        kind=kind,
        scheme=scheme,
        rate=float(value),
        seed=seed,
        perturbation_spec="" if p is None else p.spec.to_json(),
        perturbation_version=0 if p is None else p.version,
        positions=p.to_string() if kind == "position" and p is not None else None,
        features=p.to_string() if kind == "feature" and p is not None else None,
    )
