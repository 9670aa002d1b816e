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
from posgen.harness.decomposition.tables import (
    layer_means,
    past_context_table,
    summarize,
    write_outputs,
)


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
    parser.add_argument(
        "--length",
        type=_length_scheme,
        default=None,
        help="run the model under a length scheme of posgen length: none, scale:F or yarn:F "
        "(default: as trained); the table then gets r before/past the trained context C",
    )
    parser.add_argument(
        "--trained-context",
        type=_positive,
        default=None,
        help="C for the past-context figures (default: the config's max_position_embeddings); "
        "they are computed when --tokens > C, --length or --trained-context is given",
    )
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


def _length_scheme(text: str):
    from posgen.perturbations.base import PerturbationError
    from posgen.perturbations.length import LengthLambda, parse_length

    try:
        scheme = parse_length(text)
    except (PerturbationError, ValueError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    if isinstance(scheme, LengthLambda):
        raise argparse.ArgumentTypeError(
            "lambda:G,W is not supported by decompose (its attention function would replace "
            "the capture's); use none, scale:F or yarn:F"
        )
    return scheme


def _context(args: argparse.Namespace) -> int | None:
    """C for the past-context figures, or None when they are not asked for."""
    from transformers import AutoConfig

    from posgen.harness.embedded import resolve_pretrained

    trained = getattr(
        AutoConfig.from_pretrained(resolve_pretrained(args.model)), "max_position_embeddings", None
    )
    c = args.trained_context or trained
    wanted = args.length is not None or args.trained_context is not None
    if c is None:
        if wanted:
            raise SystemExit(
                "posgen decompose: the model config has no max_position_embeddings; pass --trained-context"
            )
        return None
    return c if wanted or args.tokens > c else None


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def main(args: argparse.Namespace) -> int:
    import pandas as pd
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    if args.random_init and args.length is not None:
        raise SystemExit(
            "posgen decompose: --random-init with --length is not supported (the twin is "
            "built without the scheme's loading); run them separately"
        )
    context = _context(args)
    tables = [
        decompose_model(
            args.model,
            docs=args.docs,
            tokens=args.tokens,
            seed=args.seed,
            device=device,
            length=args.length,
            context=context,
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
                context=context,
            )
        )
    table = pd.concat(tables, ignore_index=True)
    summary = summarize(table)
    per_layer = layer_means(table)
    write_outputs(args.out, table, summary, per_layer)
    write_plots(args.out, table, median_head_map(table, model=args.model, device=device))
    if args.experiments:
        _experiments(args, device)
    with pd.option_context("display.width", 200, "display.max_columns", 40):
        print(summary.T.to_string(header=False))
        if context is not None:
            print(f"per layer, trained context C = {context} (past C: query rows i >= C):")
            print(past_context_table(per_layer).to_string(index=False, float_format="%.4f"))
    print(f"posgen decompose: wrote {args.out}")
    return 0
