"""``posgen decompose``: the decomposition of one model (and its random-init twin) on the
probe text, with its tables and plots."""

from __future__ import annotations

import argparse
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


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default="embedded",
        help="model name or folder (default: embedded = SmolLM2-135M)",
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
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda if any)")
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


def _experiments(args: argparse.Namespace, device: str) -> None:
    from posgen.harness.decomposition.experiments import write_experiments

    model, tokenizer = load_model(args.model, device=device)
    twin = None
    if args.random_init:
        twin = random_init_twin(model.config, seed=args.seed, name=args.model).to(device)
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


def main(args: argparse.Namespace) -> int:
    import pandas as pd
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    tables = [
        decompose_model(
            args.model, docs=args.docs, tokens=args.tokens, seed=args.seed, device=device
        )
    ]
    if args.random_init:
        tables.append(
            decompose_model(
                args.model,
                docs=args.docs,
                tokens=args.tokens,
                random_init=True,
                seed=args.seed,
                device=device,
            )
        )
    table = pd.concat(tables, ignore_index=True)
    summary = summarize(table)
    write_outputs(args.out, table, summary, layer_means(table))
    write_plots(args.out, table, median_head_map(table, model=args.model, device=device))
    if args.experiments:
        _experiments(args, device)
    with pd.option_context("display.width", 200, "display.max_columns", 40):
        print(summary.T.to_string(header=False))
    print(f"posgen decompose: wrote {args.out}")
    return 0
