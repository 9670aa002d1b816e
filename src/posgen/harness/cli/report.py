"""``posgen report RUN...``: rebuild run folders' tables, scores and report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="run folder(s)")


def main(args: argparse.Namespace) -> int:
    from posgen.results.folder.run_store import RunStore
    from posgen.results.folder.schema import SchemaError

    status = 0
    for run in args.runs:
        try:
            RunStore.open(run)  # a bad folder is refused before the report's libraries load
            from posgen.results.report.build import not_scored_notes, regenerate

            paths = regenerate(run)
        except SchemaError as e:
            print(f"posgen report: {e}", file=sys.stderr)
            status = 2
            continue
        for note in not_scored_notes(run):
            print(f"posgen report: note: {note}", file=sys.stderr)
        print(f"posgen report: {paths['html']}")
    return status
