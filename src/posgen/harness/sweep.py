"""``posgen run``: the perturbation sweep, the decomposition fit, scoring and the report.

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

import argparse
import re
import sys
from pathlib import Path

from posgen.harness.sweep_plan import (
    PlanError,
    default_out,
    plan_cells,
    resolve_config,
)

__all__ = ["configure_parser", "main", "run_sweep"]


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        action="append",
        dest="models",
        metavar="ID_OR_PATH",
        help="model to sweep (repeatable): a local folder, a hub id, or "
        "'embedded' (SmolLM2-135M, the default)",
    )
    parser.add_argument(
        "--suite",
        default="offline",
        help="'offline' (posgen_prose + posgen_cloze, the default) or a "
        "comma-separated list of lm-eval tasks",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a coarser grid on fewer documents (about 2 minutes on CPU)",
    )
    parser.add_argument(
        "--random-init",
        action="store_true",
        help="also sweep a seeded random-init twin of each model",
    )
    parser.add_argument("--out", type=Path, help="run folder (default ./posgen-runs/<name>)")
    parser.add_argument("--seed", type=int, default=1234, help="perturbation seed")
    parser.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="perturbation seeds per cell (seed, seed+1, ...; one model load); the "
        "scores average each document over them and the intervals include the draw",
    )
    parser.add_argument(
        "--limit", type=int, help="documents per task (default: per-task limits of the preset)"
    )
    parser.add_argument(
        "--rates",
        help="comma-separated rates for text and position swap "
        "(0 included for the baseline), e.g. 0,0.05,0.2",
    )
    parser.add_argument("--sigmas", help="comma-separated σ for rope_noise, e.g. 0,0.5,2")
    parser.add_argument(
        "--threshold",
        type=float,
        default=0.10,
        help="tolerance threshold: relative perplexity increase (0.10)",
    )
    parser.add_argument(
        "--threshold-acc",
        type=float,
        default=0.05,
        help="tolerance threshold: absolute accuracy drop (0.05)",
    )
    parser.add_argument("--batch-size", type=int, default=8, help="lm-eval batch size")
    parser.add_argument("--device", help="torch device (default: cuda if available, else cpu)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def main(args: argparse.Namespace) -> int:
    try:
        config = resolve_config(args)  # every check before any model loads
    except PlanError as e:
        print(f"posgen run: {e}", file=sys.stderr)
        return 2
    from posgen.results.store import RunConflictError, RunStore

    out = args.out or default_out(config)
    try:
        store = RunStore.create(out, config)
    except RunConflictError as e:
        print(f"posgen run: {e}", file=sys.stderr)
        return 2
    paths = run_sweep(store, device=args.device, progress=not args.no_progress)
    print(f"posgen run: report in {paths['html']} (and {paths['md'].name})")
    return 0


def run_sweep(store, device: str | None = None, progress: bool = True) -> dict[str, Path]:
    """Run every unfinished cell of ``store``'s config, then score and report."""
    from tqdm.auto import tqdm

    from posgen.harness.sweep_cells import ModelSession
    from posgen.results.report import regenerate

    config = store.config
    plan = plan_cells(config)
    units = [(m, c) for m in config["models"] for c in plan]
    decomp = [m for m in config["models"] if config["decompose"]["docs"] > 0]
    done = sum(store.has_cell(m["label"], c["cell_id"]) for m, c in units) + sum(
        store.decomposition_path(m["label"]).is_file() for m in decomp
    )
    bar = tqdm(
        total=len(units) + len(decomp),
        initial=done,
        desc="posgen run",
        disable=not progress,
        file=sys.stderr,
        dynamic_ncols=True,
    )
    for model in config["models"]:
        todo = [c for c in plan if not store.has_cell(model["label"], c["cell_id"])]
        need_fit = model in decomp and not store.decomposition_path(model["label"]).is_file()
        if not todo and not need_fit:
            continue
        with ModelSession(store, model, device=device) as session:
            for cell in todo:
                bar.set_postfix_str(f"{_short(model['label'])} {cell['cell_id']}")
                session.evaluate(cell)
                bar.update()
            if need_fit:
                bar.set_postfix_str(f"{_short(model['label'])} decomposition")
                session.decompose()
                bar.update()
    bar.set_postfix_str("scoring and report")
    paths = regenerate(store.root)
    bar.close()
    return paths


def _short(label: str) -> str:
    return re.sub(r".*/", "", label)[-28:]
