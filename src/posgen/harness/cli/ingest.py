"""``posgen ingest DIR... --out RUN``: a run folder (tables, scores, report) from lm-eval
output folders written with ``--log_samples`` (see :mod:`posgen.results.ingest.folders`)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from posgen.harness.cli.arguments import add_include_path_argument, add_threshold_arguments


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "dirs",
        nargs="+",
        type=Path,
        metavar="DIR",
        help="lm_eval --output_path folder(s) (or results_*.json files), written with "
        "--log_samples: the baseline and the perturbed cells of the same documents "
        "(hf-posgen with positions= or features= in every layer; layers=, heads=, "
        "logits= and length= are refused), each model's cells run with the same settings "
        "that change what is scored (max_length, dtype, few-shot, chat template, ...; "
        "docs/running.md)",
    )
    parser.add_argument("--out", type=Path, required=True, help="the run folder to write")
    add_threshold_arguments(parser)
    add_include_path_argument(parser)


def main(args: argparse.Namespace) -> int:
    from posgen.harness.input_error import InputError
    from posgen.harness.out_folder import check_out_folder
    from posgen.harness.run.options import check_include_paths
    from posgen.results.folder.lock import RunLockedError
    from posgen.results.folder.run_store import RunStore
    from posgen.results.folder.schema import SchemaError
    from posgen.results.folder.store import RunConflictError
    from posgen.results.ingest.folders import ingest

    if not (args.threshold > 0 and args.threshold_acc > 0):
        print("posgen ingest: --threshold and --threshold-acc must be > 0", file=sys.stderr)
        return 2
    try:
        check_out_folder(args.out, folder=RunStore)
        include_path = check_include_paths(args.include_path)
    except InputError as e:
        print(f"posgen ingest: {e}", file=sys.stderr)
        return 2
    from posgen.results.folder.config import Scoring

    # the thresholds given; the bootstrap's iterations, seed and confidence: Scoring's own
    scoring = Scoring(threshold_ppl=args.threshold, threshold_acc=args.threshold_acc).to_dict()
    try:
        paths = ingest(args.dirs, args.out, scoring, include_path)
    except (SchemaError, RunConflictError, RunLockedError) as e:
        print(f"posgen ingest: {e}", file=sys.stderr)
        return 2
    from posgen.results.report.build import not_scored_notes

    for note in not_scored_notes(args.out):
        print(f"posgen ingest: note: {note}", file=sys.stderr)
    print(f"posgen ingest: report in {paths['html']} (and {paths['md'].name})")
    return 0
