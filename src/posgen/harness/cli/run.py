"""``posgen run``: sweep, decomposition, scores and report (see :mod:`posgen.harness.run.sweep`)."""

from __future__ import annotations

import argparse
import shutil
import sys
from pathlib import Path

from posgen.harness.run.plan import (
    PlanError,
    check_model_side_kinds,
    default_out,
    resolve_config,
)


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
        "--limit", type=int, help="documents per task (default: per-task limits of the preset)"
    )
    parser.add_argument(
        "--rates",
        help="comma-separated rates for text and position swap "
        "(0 included for the baseline), e.g. 0,0.05,0.2",
    )
    parser.add_argument("--sigmas", help="comma-separated σ for rope_noise, e.g. 0,0.5,2")
    parser.add_argument(
        "--kinds",
        help="perturbation kinds to sweep, a comma-separated subset of "
        "text,position,feature (default: all three)",
    )
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
    parser.add_argument(
        "--batch-size", default="8", help="lm-eval batch size: N, auto or auto:N (default 8)"
    )
    load = parser.add_argument_group("model loading (as lm-eval's hf model)")
    load.add_argument(
        "--dtype", default="float32", help="float32 (default), bfloat16, float16, auto"
    )
    load.add_argument("--revision", help="hub branch, tag or commit (recorded as its commit)")
    load.add_argument("--trust-remote-code", action="store_true", help="run the hub repo's code")
    load.add_argument("--attn-implementation", help="eager, sdpa, flash_attention_2, ...")
    load.add_argument("--peft", metavar="ADAPTER", help="a PEFT adapter folder or hub id")
    parser.add_argument("--device", help="torch device (default: cuda if available, else cpu)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")


def main(args: argparse.Namespace) -> int:
    try:
        config = resolve_config(args)  # every check before any model loads
        notes = check_model_side_kinds(config)
    except PlanError as e:
        print(f"posgen run: {e}", file=sys.stderr)
        return 2
    for note in notes:
        print(f"posgen run: note: {note}", file=sys.stderr)
    from posgen.results.run_lock import RunLock, RunLockedError
    from posgen.results.store import RunConflictError, check_run_folder

    out = args.out or default_out(config)
    try:
        check_run_folder(out)  # before the lock file is put into someone else's folder
        with RunLock(out) as lock:  # refused at once if another run writes there
            if lock.removed:
                print(
                    f"posgen run: removed {len(lock.removed)} temporary file(s) left by an "
                    "interrupted run",
                    file=sys.stderr,
                )
            paths = _run_locked(args, config, out, fresh=lock.created)
    except (RunConflictError, RunLockedError) as e:
        print(f"posgen run: {e}", file=sys.stderr)
        return 2
    print(f"posgen run: report in {paths['html']} (and {paths['md'].name})")
    return 0


def _run_locked(args: argparse.Namespace, config, out: Path, fresh: bool) -> dict[str, Path]:
    """The run, with the folder's lock held; a folder this run created is removed again
    if the run fails before anything finished (no half-made run folder is left)."""
    from posgen.harness.run.sweep import run_sweep
    from posgen.results.store import RunStore

    store = None
    try:
        store = RunStore.create(out, config.to_dict())  # results/ stores plain JSON data
        return run_sweep(store, device=args.device, progress=not args.no_progress)
    except BaseException:
        if fresh and (store is None or not store.has_results()):
            shutil.rmtree(out, ignore_errors=True)
        raise
