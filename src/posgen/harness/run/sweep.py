"""The run: the perturbation sweep, the decomposition fit, scoring and the report.

For every model: one load, then one lm-eval evaluation per cell, each written to the run
folder as soon as it finishes (see :mod:`posgen.results.folder.store`):

- the unperturbed baseline (rate 0), computed once per task and shared by every scheme
  (rate 0 of each scheme is the identity perturbation, checked, so this is exact);
- ``text``: words reordered in the documents (posgen's perturbed lm-eval tasks);
- ``position``: position indices perturbed inside the model (``hf-posgen``);
- ``feature``: RoPE noise of std σ inside the model (``hf-posgen``);

then the attention-logit decomposition of the same weights, and with ``--kinds depth
--depth-account`` the decomposition's account of the depth curve
(:mod:`posgen.harness.decomposition.depth_account`: ``RUN/depth_account/``), then
(``--random-init``) the same for a seeded random-init twin of the architecture. The caller then writes the
scores and report once (``posgen.results.report.build.regenerate``), after whatever else
the run adds (``posgen run --length``). Everything the results depend on is in the resolved config; a rerun with the
same config resumes, a different one into the same folder is refused.
"""

from __future__ import annotations

import re
import sys

from posgen.harness.launch import Launch
from posgen.harness.run.cells import ModelSession, depth_account_spec
from posgen.results.folder.config import ModelEntry, RunConfig
from posgen.results.folder.plan import plan_cells

__all__ = ["run_sweep"]


def run_sweep(
    store, device: str | None = None, progress: bool = True, launch: Launch | None = None
) -> None:
    """Run every unfinished cell and decomposition of ``store``'s config.

    Under a data-parallel ``launch`` every rank runs the cells rank 0 found unfinished,
    in its order; rank 0 alone fits the decompositions and writes."""
    from tqdm.auto import tqdm

    launch = launch or Launch()
    config = store.run_config
    plans = {m.label: plan_cells(config, m) for m in config.models}
    units = [(m, c) for m in config.models for c in plans[m.label]]
    decomp = [m for m in config.models if config.decompose.docs > 0 and m.model_side]
    account = accounted_models(config)
    done = sum(store.has_cell(m.label, c.cell_id) for m, c in units) + sum(
        store.decomposition_path(m.label).is_file() for m in decomp
    )
    done += sum(store.has_depth_account(m.label) for m in account)
    bar = tqdm(
        total=len(units) + len(decomp) + len(account),
        initial=done,
        desc="posgen run",
        disable=not (progress and launch.is_main),
        file=sys.stderr,
        dynamic_ncols=True,
    )
    schedule = launch.share(
        _schedule(store, config, plans, decomp, account) if launch.is_main else None
    )
    for model in config.models:
        todo = [c for c in plans[model.label] if c.cell_id in schedule[model.label]["todo"]]
        need_fit = schedule[model.label]["fit"] and launch.is_main
        need_account = schedule[model.label]["account"] and launch.is_main
        if not todo and not need_fit and not need_account:
            continue
        with ModelSession(store, config, model, device=device, launch=launch) as session:
            for cell in todo:
                bar.set_postfix_str(f"{_short(model.label)} {cell.cell_id}")
                session.evaluate(cell)
                bar.update()
            if need_fit:
                bar.set_postfix_str(f"{_short(model.label)} decomposition")
                session.decompose()
                bar.update()
            if need_account:
                bar.set_postfix_str(f"{_short(model.label)} depth account")
                session.depth_account()
                bar.update()
    bar.close()


def accounted_models(config: RunConfig) -> list[ModelEntry]:
    """The models whose depth curve the decomposition accounts for: with ``--kinds
    depth`` on a built-in log-likelihood depth task, every model ``logits=`` runs on."""
    if config.depth is None or not config.depth.account_docs:
        return []  # --depth-account not given
    if not depth_account_spec(config).tasks:
        return []
    return [m for m in config.models if m.model_side]


def _schedule(
    store, config: RunConfig, plans: dict[str, list], decomp: list, account: list
) -> dict[str, dict]:
    """Per model label: the unfinished cell ids, and whether its decomposition and its
    depth account are due (plain data: rank 0 sends it to the other ranks of a launch)."""
    return {
        m.label: {
            "todo": [c.cell_id for c in plans[m.label] if not store.has_cell(m.label, c.cell_id)],
            "fit": m in decomp and not store.decomposition_path(m.label).is_file(),
            "account": m in account and not store.has_depth_account(m.label),
        }
        for m in config.models
    }


def _short(label: str) -> str:
    return re.sub(r".*/", "", label)[-28:]
