"""``posgen check RUN --baseline FILE``: the CI gate; exit 0 pass, 1 a measured regression,
2 invalid input (see :mod:`posgen.results.gate.check`)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from posgen.results.gate.check import (
    GateInputError,
    baseline_payload,
    compare,
    format_table,
    junit_xml,
    load_baseline,
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", type=Path, help="run folder to check")
    parser.add_argument("--baseline", type=Path, required=True, help="file from `posgen baseline`")
    parser.add_argument(
        "--model", help="model label in the run (default: its only non-random-init model)"
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        default=0.0,
        help="regression allowed per cell, in per-document units (nats per word or "
        "byte; accuracy points; nats per token for length cells); default 0",
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="family-wise false-alarm rate over all cells (Holm); default 0.05",
    )
    parser.add_argument("--junit-xml", type=Path, help="also write a JUnit XML report here")


def _writable(path: Path | None) -> None:
    if path is None:
        return
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir() or not parent.is_dir() or not os.access(parent, os.W_OK):
        raise GateInputError(
            f"--junit-xml {path}: cannot write there (no such folder, or not writable)"
        )


def main(args: argparse.Namespace) -> int:
    from posgen.results.folder.schema import SchemaError
    from posgen.results.folder.store import atomic_write_text

    try:
        _writable(args.junit_xml)
        baseline = load_baseline(args.baseline)
        current = baseline_payload(args.run, args.model)
        rows = compare(baseline, current, args.tolerance, args.alpha)
        if args.junit_xml:
            atomic_write_text(args.junit_xml, junit_xml(rows))
    except (GateInputError, SchemaError, OSError) as e:
        print(f"posgen check: {e}", file=sys.stderr)
        return 2
    print(format_table(rows))
    failed = sum(r["failed"] for r in rows)
    print(
        f"\nposgen check: {failed} of {len(rows)} cells degrade more than the baseline "
        f"({current['model']} vs {baseline['model']}; paired by document, Holm over "
        f"{len(rows)} cells at alpha {args.alpha}, tolerance {args.tolerance})"
    )
    return 1 if failed else 0
