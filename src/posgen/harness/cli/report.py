"""``posgen report RUN...``: rebuild run folders' tables, scores and report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from posgen.results.report.build import regenerate


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("runs", nargs="+", type=Path, metavar="RUN", help="run folder(s)")


def main(args: argparse.Namespace) -> int:
    from posgen.results.folder.schema import SchemaError

    status = 0
    for run in args.runs:
        try:
            paths = regenerate(run)
        except SchemaError as e:
            print(f"posgen report: {e}", file=sys.stderr)
            status = 2
            continue
        print(f"posgen report: {paths['html']}")
    return status
