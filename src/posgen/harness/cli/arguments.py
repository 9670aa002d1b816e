"""Argument groups that several subcommands share, so each flag is spelled, defaulted and
explained once. Light to import, like every module of the command line."""

from __future__ import annotations

import argparse
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
