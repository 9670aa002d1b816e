"""``posgen compare RUN_A RUN_B``: print how two runs differ."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_a", type=Path, metavar="RUN_A")
    parser.add_argument("run_b", type=Path, metavar="RUN_B")


def main(args: argparse.Namespace) -> int:
    from posgen.results.folder.folder_kind import require_folder
    from posgen.results.folder.run_store import RunStore
    from posgen.results.folder.schema import SchemaError

    try:
        for run in (args.run_a, args.run_b):
            require_folder(run, "run", "posgen compare")  # what it is, if not a run folder
            RunStore.open(run)  # a bad folder is refused before the libraries load
        from posgen.results.report.compare import compare_runs

        text = compare_runs(args.run_a, args.run_b)
    except SchemaError as e:
        print(f"posgen compare: {e}", file=sys.stderr)
        return 2
    print(text)
    return 0
