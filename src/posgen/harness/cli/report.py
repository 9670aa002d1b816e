"""``posgen report FOLDER...``: rebuild posgen folders' tables, scores and reports from the
folders alone (no model loads): a run or ingest folder, or a length, decompose, layers or
cause folder."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

# the file named for each kind of folder: a run's HTML report, else the Markdown one (a
# decompose folder: its summary table)
MAIN_FILES = ("html", "md", "summary")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "runs",
        nargs="+",
        type=Path,
        metavar="FOLDER",
        help="a folder written by posgen run, ingest, length, decompose, layers or cause",
    )


def main(args: argparse.Namespace) -> int:
    from posgen.results.folder.lock import RunLock, RunLockedError
    from posgen.results.folder.schema import SchemaError

    status = 0
    for run in args.runs:
        try:
            if not run.is_dir():
                raise SchemaError(f"folder not found: {run}")
            from posgen.results.report.folder_reports import open_folder, regenerate_folder

            folder = open_folder(run)  # a bad folder is refused before anything is written
            with RunLock(run):  # not while a run writes it
                paths = regenerate_folder(folder)
        except (SchemaError, RunLockedError) as e:
            print(f"posgen report: {e}", file=sys.stderr)
            status = 2
            continue
        if "html" in paths:
            from posgen.results.report.build import not_scored_notes

            for note in not_scored_notes(run):
                print(f"posgen report: note: {note}", file=sys.stderr)
        print(f"posgen report: {next(paths[k] for k in MAIN_FILES if k in paths)}")
    return status
