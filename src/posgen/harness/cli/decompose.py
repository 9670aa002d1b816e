"""``posgen decompose``: the decomposition of one model (and its random-init twin) on the
probe text, with its tables and plots."""

from __future__ import annotations

import argparse
import sys
from dataclasses import replace
from pathlib import Path

from posgen.harness.decomposition.pipeline import (  # light: torch loads inside
    DEFAULT_DOCS,
    DEFAULT_TOKENS,
    decompose_model,
    load_model,
    median_head_map,
    random_init_twin,
)
from posgen.harness.decomposition.plots import write_plots
from posgen.harness.decomposition.tables import layer_means, summarize, write_outputs
from posgen.harness.loading import (
    add_loading_arguments,
    check_device,
    default_device,
    model_entries,
    require_rope,
)
from posgen.harness.out_folder import check_out_folder
from posgen.harness.run.options import PlanError


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default="embedded",
        help="a local folder, a hub id, or 'embedded' (SmolLM2-135M, the default)",
    )
    parser.add_argument(
        "--random-init",
        action="store_true",
        help="also fit a seeded random-init twin of the same architecture",
    )
    parser.add_argument(
        "--docs",
        type=_positive,
        default=DEFAULT_DOCS,
        help=f"probe windows (default {DEFAULT_DOCS})",
    )
    parser.add_argument(
        "--tokens",
        type=_positive,
        default=DEFAULT_TOKENS,
        help=f"tokens per window, n (default {DEFAULT_TOKENS})",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random-init twin")
    parser.add_argument(
        "--experiments",
        action="store_true",
        help="also run controlled distance and the q/k pattern (and on the "
        "random-init twin with --random-init)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("posgen-runs/decompose"),
        help="output folder (default posgen-runs/decompose)",
    )
    add_loading_arguments(parser)


def _experiments(args: argparse.Namespace, entry, device: str) -> None:
    from posgen.harness.decomposition.experiments import write_experiments

    model, tokenizer = load_model(entry, device=device)
    twin = None
    if args.random_init:
        twin = random_init_twin(model.config, seed=args.seed, name=entry.path).to(device)
    summaries = write_experiments(
        args.out,
        model,
        tokenizer,
        tokens=args.tokens,
        docs=min(args.docs, 2),
        label=args.model,
        twin=twin,
    )
    for name, frame in summaries.items():
        print(f"{name}:\n{frame.to_string(index=False)}")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def check_arguments(args: argparse.Namespace):
    """Every argument checked before any model loads: the model entry and the device."""
    if not 0 <= args.seed < 2**32:
        raise PlanError(f"--seed must be an integer in [0, 2**32), got {args.seed}")
    check_out_folder(args.out)
    device = check_device(args.device)
    (entry,) = model_entries([args.model], args)
    require_rope(entry, "posgen decompose")
    return entry, device


def main(args: argparse.Namespace) -> int:
    import pandas as pd

    try:
        entry, device = check_arguments(args)
    except PlanError as e:
        print(f"posgen decompose: {e}", file=sys.stderr)
        return 2
    device = device or default_device()
    kw = dict(docs=args.docs, tokens=args.tokens, seed=args.seed, device=device)
    tables = [decompose_model(entry, **kw)]
    if args.random_init:  # the twin keeps the trained model's label
        tables.append(decompose_model(replace(entry, random_init=True), random_init=True, **kw))
    table = pd.concat(tables, ignore_index=True)
    summary = summarize(table)
    write_outputs(args.out, table, summary, layer_means(table))
    write_plots(args.out, table, median_head_map(table, model=entry, device=device))
    if args.experiments:
        _experiments(args, entry, device)
    with pd.option_context("display.width", 200, "display.max_columns", 40):
        print(summary.T.to_string(header=False))
    print(f"posgen decompose: wrote {args.out}")
    return 0
