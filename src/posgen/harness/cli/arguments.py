"""Argument groups that several subcommands share, so each flag is spelled, defaulted and
explained once. Light to import, like every module of the command line."""

from __future__ import annotations

import argparse

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
