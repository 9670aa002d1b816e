"""``posgen length``: NLL by position past the trained context, per length scheme.

Examples::

    posgen length --quick                      # embedded model, 2 documents, F = 2, 3 schemes
    posgen length --model PATH --factor 2 --schemes "none;lambda:4,4096;yarn:2"
    posgen length --max-length 16384 --positions swap:0.05

Schemes are ``;``-separated (``lambda`` takes ``GLOBAL,WINDOW``). The trained context C is
the model config's ``max_position_embeddings`` unless ``--trained-context`` overrides it
(the override sets buckets, the reference range and the default schemes; a rope
scaling still reads the config's own value). Output: a resumable folder under
``posgen-runs/`` (see :mod:`posgen.harness.length.runner`).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
from pathlib import Path

QUICK_DOCUMENTS = 2
QUICK_SCHEMES = "none;lambda:4,C;scale:2"
_C = re.compile(r"\bC\b")


def with_context(text: str, trained_context: int) -> str:
    """Schemes text with every stand-alone ``C`` replaced by the trained context."""
    return _C.sub(str(trained_context), text)


ALL_DOCUMENTS = 5


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--model", default="embedded", help="path or embedded alias")
    size = parser.add_mutually_exclusive_group()
    size.add_argument("--max-length", type=int, default=None, help="tokens per document")
    size.add_argument("--factor", type=float, default=None, help="max length = F × C (default 2)")
    parser.add_argument("--trained-context", type=int, default=None, help="override C")
    parser.add_argument(
        "--schemes",
        default=None,
        help="';'-separated length schemes; C stands for the trained context "
        "(default: none;lambda:4,C;scale:F;yarn:F)",
    )
    parser.add_argument("--positions", default=None, help="a position scheme applied too")
    parser.add_argument("--documents", type=int, default=None, help="number of documents (<= 5)")
    parser.add_argument("--bucket-width", type=int, default=None, help="default C/8")
    parser.add_argument("--threshold", type=float, default=0.10, help="PPL increase (0.10)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--block-size", type=int, default=None, help="Λ query block")
    parser.add_argument("--chunk", type=int, default=1024, help="LM-head positions per chunk")
    parser.add_argument("--out", type=Path, default=None, help="run folder")
    parser.add_argument(
        "--quick",
        action="store_true",
        help="embedded model, 2 documents, F = 2, schemes none;lambda:4,C;scale:2",
    )


def _fail(message: str) -> SystemExit:
    return SystemExit(f"posgen length: {message}")


def resolve_config(args: argparse.Namespace, trained: int):
    """The :class:`LengthRunConfig` from the arguments and the model's trained context."""
    from posgen.harness.length.runner import LengthRunConfig
    from posgen.perturbations import parse
    from posgen.perturbations.base import PerturbationError
    from posgen.perturbations.length import parse_length_list

    c = args.trained_context or trained
    factor = 2.0 if args.factor is None else args.factor
    if args.factor is not None and not (math.isfinite(factor) and factor > 0):
        raise _fail(f"--factor must be > 0, got {factor}")
    max_length = args.max_length or round(factor * c)
    f_text = f"{max_length / c:g}"
    if args.schemes:
        text = with_context(args.schemes, c)
    elif args.quick:
        text = with_context(QUICK_SCHEMES, c)
    else:
        text = f"none;lambda:4,{c};scale:{f_text};yarn:{f_text}"
    n_docs = args.documents or (QUICK_DOCUMENTS if args.quick else ALL_DOCUMENTS)
    if not 1 <= n_docs <= ALL_DOCUMENTS:
        raise _fail(f"--documents must be in [1, {ALL_DOCUMENTS}], got {n_docs}")
    try:
        schemes = parse_length_list(text)
        if args.positions:
            parse("position", args.positions)
    except PerturbationError as exc:
        raise _fail(str(exc)) from None
    from posgen.tasks.long_documents import DOCUMENT_ORDER

    try:
        return LengthRunConfig(
            model=args.model,
            max_length=max_length,
            trained_context=c,
            schemes=tuple(s.to_string() for s in schemes),
            documents=DOCUMENT_ORDER[:n_docs],
            bucket_width=args.bucket_width or max(1, c // 8),
            positions=args.positions,
            seed=args.seed,
            chunk=args.chunk,
            block_size=args.block_size,
            threshold=args.threshold,
        )
    except ValueError as exc:
        raise _fail(str(exc)) from None


def _check_specs(args: argparse.Namespace) -> None:
    """Refuse bad scheme strings before any model or config is read."""
    from posgen.perturbations import parse
    from posgen.perturbations.base import PerturbationError
    from posgen.perturbations.length import parse_length_list

    try:
        if args.schemes:
            parse_length_list(with_context(args.schemes, 2))
        if args.positions:
            parse("position", args.positions)
    except PerturbationError as exc:
        raise _fail(str(exc)) from None


def main(args: argparse.Namespace) -> int:
    from transformers import AutoConfig

    from posgen.atomic import atomic_write_bytes, atomic_write_text
    from posgen.harness.embedded import resolve_pretrained
    from posgen.harness.length.runner import prepare_folder, read_results, run_documents
    from posgen.results.folder.store import atomic_write_json
    from posgen.results.report.length import curves_png, markdown
    from posgen.results.scores.length import score_length
    from posgen.tasks.long_documents import long_documents

    _check_specs(args)
    if args.quick:
        args.model = "embedded"
        if args.max_length is not None or args.factor not in (None, 2.0):
            raise _fail("--quick fixes F = 2; drop --max-length/--factor")
    path = resolve_pretrained(args.model)
    trained = getattr(AutoConfig.from_pretrained(path), "max_position_embeddings", None)
    if trained is None and args.trained_context is None:
        raise _fail("the model config has no max_position_embeddings; pass --trained-context")
    config = resolve_config(args, int(trained or 0))
    body = json.dumps(config.to_dict(), sort_keys=True).encode()
    folder = args.out or Path("posgen-runs") / f"length-{hashlib.sha256(body).hexdigest()[:12]}"
    prepare_folder(folder, config)
    texts = long_documents()
    try:
        run_documents(folder, config, path, texts)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    scores = score_length(read_results(folder, config), config.to_dict())
    atomic_write_json(folder / "length_scores.json", scores)
    atomic_write_bytes(folder / "length_curves.png", curves_png(scores))
    text = markdown(scores)
    atomic_write_text(folder / "length.md", text)
    print(text)
    print(f"posgen length: wrote {folder}")
    return 0


def run_for_models(run_root: Path, models: list[dict], schemes: str) -> dict[str, Path]:
    """``posgen run --length``: a length run per (non random-init) model of a sweep into
    ``RUN/length/<model>/``, then the sweep's report is rebuilt to include it."""
    from posgen.results.folder.store import slug
    from posgen.results.report.build import regenerate

    parser = argparse.ArgumentParser()
    configure_parser(parser)
    for model in models:
        if model.get("random_init"):
            continue  # a random-init twin has no folder to load with rope scalings
        out = run_root / "length" / slug(model["label"])
        argv = ["--model", str(model["path"]), "--out", str(out)]
        if schemes == "quick":
            argv += ["--documents", str(QUICK_DOCUMENTS), "--schemes", QUICK_SCHEMES]
        else:
            argv += ["--schemes", schemes]
        main(parser.parse_args(argv))
    return regenerate(run_root)
