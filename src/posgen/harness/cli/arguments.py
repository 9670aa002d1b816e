"""Argument groups that several subcommands share, so each flag is spelled, defaulted and
explained once. Light to import, like every module of the command line."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from pathlib import Path

from posgen.results.folder.config import Scoring


def add_threshold_arguments(parser: argparse.ArgumentParser) -> None:
    """``--threshold`` and ``--threshold-acc`` (``posgen run`` and ``posgen ingest``)."""
    defaults = Scoring()
    parser.add_argument(
        "--threshold",
        type=float,
        default=defaults.threshold_ppl,
        help=f"tolerance threshold: relative perplexity increase ({defaults.threshold_ppl:g})",
    )
    parser.add_argument(
        "--threshold-acc",
        type=float,
        default=defaults.threshold_acc,
        help=f"tolerance threshold: absolute accuracy drop ({defaults.threshold_acc:g})",
    )


def add_include_path_argument(parser: argparse.ArgumentParser) -> None:
    """``--include-path DIR`` (repeatable): folders of the user's own lm-eval task YAML, as
    ``lm_eval --include_path`` (``posgen run``, ``posgen ingest``, ``posgen tasks``)."""
    parser.add_argument(
        "--include-path",
        action="append",
        type=Path,
        metavar="DIR",
        help="a folder of your own lm-eval task YAML (repeatable), as lm_eval --include_path",
    )


def add_profile_arguments(parser: argparse.ArgumentParser, default_limit: int) -> None:
    """``--model``, ``--random-init``, ``--limit`` and ``--seed`` (``posgen layers``,
    ``posgen cause``)."""
    from posgen.perturbations.seeding import DEFAULT_SEED

    parser.add_argument(
        "--model", default="embedded", metavar="ID_OR_PATH", help="model (default: embedded)"
    )
    parser.add_argument(
        "--random-init",
        action="store_true",
        help="the seeded random-init twin of --model instead of the model (its "
        "architecture, weights drawn from --seed)",
    )
    parser.add_argument(
        "--limit", type=int, default=default_limit, help=f"posgen_prose documents ({default_limit})"
    )
    parser.add_argument(
        "--seed",
        type=int,
        default=DEFAULT_SEED,
        help=f"perturbation seed, in [0, 2**32) ({DEFAULT_SEED})",
    )


def add_folder_arguments(parser: argparse.ArgumentParser, command: str, combine: str) -> None:
    """``--combine``, ``--out``, ``--batch-size``, the loading flags and ``--no-progress``
    (``posgen layers``, ``posgen cause``); ``combine``: what a combined report holds."""
    from posgen.harness.loading.options import add_loading_arguments

    parser.add_argument(
        "--combine",
        nargs="+",
        type=Path,
        metavar="RUN",
        help=f"instead of a run: one report ({combine}) over finished posgen {command} "
        "folders; no model loads",
    )
    parser.add_argument(
        "--out",
        type=Path,
        help=f"output folder (default ./posgen-runs/{command}/<model>, with --combine "
        f"./posgen-runs/{command}/combined)",
    )
    parser.add_argument("--batch-size", default="8", help="lm-eval batch size (default 8)")
    add_loading_arguments(parser)
    parser.add_argument("--no-progress", action="store_true", help="no per-cell progress lines")


PROFILE_DOCUMENTS = "posgen_prose.jsonl"  # the documents of posgen layers and posgen cause


def documents_limit(limit: int) -> int:
    """``--limit`` of ``posgen layers`` / ``posgen cause`` read as lm-eval reads its own,
    "at most": the number of posgen_prose documents that run (the first ``limit``), which
    is what their folder records."""
    from posgen.tasks.offline import load_rows

    return min(limit, len(load_rows(PROFILE_DOCUMENTS)))


def limit_note(asked: int, ran: int) -> str | None:
    """The note of a ``--limit`` above the documents there are (None when all asked ran)."""
    if ran >= asked:
        return None
    return (
        f"--limit {asked}: posgen_prose has {ran} documents; all {ran} run and the folder "
        f"records --limit {ran}"
    )


def check_out_and_layers(args: argparse.Namespace, folder: type) -> None:
    """``--out``, ``--layers`` and ``--seed`` of ``posgen layers`` / ``posgen cause`` (its
    folder class ``folder``), checked before anything else (no config read yet): an
    unusable folder or one holding something else, an empty ``--layers ''``, which would
    silently mean every layer, a seed outside [0, 2**32) (``posgen run``'s range, and
    hf-posgen's ``perturb_seed``'s, which it sets). Raises :class:`InputError`."""
    from posgen.harness.input_error import InputError
    from posgen.harness.model_side.positions.selection import LAYERS_FORMS
    from posgen.harness.out_folder import check_out_folder

    if args.out is not None:
        check_out_folder(args.out, folder=folder)
    if args.layers is not None and not args.layers.strip():
        raise InputError(f"--layers '': give {LAYERS_FORMS}, or leave --layers out for every layer")
    if not 0 <= args.seed < 2**32:
        raise InputError(f"--seed must be an integer in [0, 2**32), got {args.seed}")


COMBINE_KEEPS = {"combine", "out", "no_progress"}  # what --combine takes besides folders


def combine_command(
    args: argparse.Namespace,
    command: str,
    configure_parser: Callable[[argparse.ArgumentParser], None],
    combine: Callable[[list[Path], Path], dict[str, Path]],
) -> int:
    """``posgen <command> --combine RUN...`` (``posgen layers``, ``posgen cause``): refuse
    any run option given a value other than its default (each folder keeps the settings of
    its own run), draw the folders into ``--out`` (default ``./posgen-<command>/combined``)
    with ``combine(runs, out)``; bad input is one line and exit 2."""
    from posgen.harness.input_error import InputError
    from posgen.results.folder.schema import SchemaError
    from posgen.results.folder.store import RunConflictError
    from posgen.results.report.combine import CombineError

    parser = argparse.ArgumentParser()
    configure_parser(parser)
    defaults = vars(parser.parse_args([]))
    given = sorted(
        "--" + k.replace("_", "-")
        for k, v in vars(args).items()
        if k in defaults and k not in COMBINE_KEEPS and v != defaults[k]
    )
    from posgen.results.folder.store import default_folder

    earlier = Path(f"posgen-{command}") / "combined"
    out = args.out or default_folder(command, "combined", earlier)
    try:
        if given:
            raise CombineError(
                f"--combine draws finished folders and runs nothing: drop {', '.join(given)} "
                "(each folder keeps the settings of its own run)"
            )
        paths = combine(list(args.combine), out)
    except (CombineError, InputError, RunConflictError, SchemaError) as e:
        print(f"posgen {command}: {e}", file=sys.stderr)
        return 2
    print(f"posgen {command}: {len(args.combine)} folder(s) combined; report in {paths['md']}")
    return 0
