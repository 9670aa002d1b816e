"""``posgen run``: sweep, decomposition, scores and report (see :mod:`posgen.harness.run.sweep`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from posgen.harness.run.plan import PlanError, default_out, resolve_config
from posgen.perturbations.seeding import DEFAULT_SEED


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
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help=f"perturbation seed ({DEFAULT_SEED})"
    )
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
    add_threshold_arguments(parser)
    parser.add_argument("--batch-size", type=int, default=8, help="lm-eval batch size")
    parser.add_argument("--device", help="torch device (default: cuda if available, else cpu)")
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--length",
        nargs="?",
        const="quick",
        metavar="SCHEMES",
        help="also run `posgen length` per model into RUN/length/<model>/ and report it: "
        "'quick' (2 documents, none;lambda;scale) or ';'-separated length schemes",
    )


def add_threshold_arguments(parser: argparse.ArgumentParser) -> None:
    """``--threshold`` and ``--threshold-acc`` (``posgen run`` and ``posgen ingest``)."""
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


def main(args: argparse.Namespace) -> int:
    try:
        config = resolve_config(args)  # every check before any model loads
        if args.length and args.length != "quick":
            _check_length(args.length)
    except PlanError as e:
        print(f"posgen run: {e}", file=sys.stderr)
        return 2
    from posgen.harness.run.launch import Launch
    from posgen.harness.run.sweep import run_sweep
    from posgen.results.store import RunConflictError, RunStore

    out = args.out or default_out(config)
    launch = Launch.detect()  # one process, or every rank of accelerate launch / torchrun
    error = None
    if launch.is_main:  # rank 0 alone writes the run folder
        try:
            store = RunStore.create(out, config)
        except RunConflictError as e:
            error = str(e)
    error = launch.share(error)
    if error is not None:
        print(f"posgen run: {error}", file=sys.stderr)
        launch.finish()
        return 2
    if not launch.is_main:
        store = RunStore.open(out)
    paths = run_sweep(store, device=args.device, progress=not args.no_progress, launch=launch)
    if args.length and launch.is_main:
        from posgen.harness.length.command import run_for_models

        paths = run_for_models(store.root, config["models"], args.length)
    launch.finish()
    if launch.is_main:
        print(f"posgen run: report in {paths['html']} (and {paths['md'].name})")
    return 0


def _check_length(text: str) -> None:
    from posgen.harness.length.command import with_context
    from posgen.perturbations.base import PerturbationError
    from posgen.perturbations.length import parse_length_list

    try:
        parse_length_list(with_context(text, 2))
    except PerturbationError as e:
        raise PlanError(f"--length: {e}") from None
