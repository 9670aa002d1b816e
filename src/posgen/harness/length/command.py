"""``posgen length``: NLL by position past the trained context, per length scheme.

Examples::

    posgen length --quick                      # embedded model, 2 documents, F = 2, 3 schemes
    posgen length --model PATH --factor 2 --schemes "none;lambda:4,4096;yarn:2"
    posgen length --max-length 16384 --positions swap:0.05
    posgen length --factor 2 --schemes "none;scale:2;yarn:2" --decompose

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
import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

from posgen.harness.run.options import PlanError
from posgen.perturbations.base import PerturbationError
from posgen.results.folder.config import ModelEntry

if TYPE_CHECKING:
    from posgen.harness.length.documents import Document

QUICK_DOCUMENTS = 2
QUICK_SCHEMES = "none;lambda:4,C;scale:2"
_C = re.compile(r"\bC\b")


def with_context(text: str, trained_context: int) -> str:
    """Schemes text with every stand-alone ``C`` replaced by the trained context."""
    return _C.sub(str(trained_context), text)


ALL_DOCUMENTS = 5


def configure_parser(parser: argparse.ArgumentParser) -> None:
    from posgen.harness.loading import add_loading_arguments

    parser.add_argument(
        "--model",
        default="embedded",
        help="a local folder, a hub id, or 'embedded' (SmolLM2-135M, the default)",
    )
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
    parser.add_argument(
        "--documents",
        type=int,
        default=None,
        help="number of documents: the first N long enough (built-in: <= 5, default 5; "
        "--data/--dataset: default all)",
    )
    data = parser.add_argument_group("documents (default: five built-in long texts)")
    data.add_argument(
        "--data",
        metavar="PATH",
        help="a text file, a folder of .txt files, or a JSONL file (see --text-field)",
    )
    data.add_argument(
        "--dataset",
        metavar="NAME[:CONFIG]:SPLIT[:FIELD]",
        help="a datasets split (hub id, cache, or a Dataset.save_to_disk folder)",
    )
    data.add_argument("--text-field", help="the text field of JSONL rows or dataset rows (text)")
    parser.add_argument("--bucket-width", type=int, default=None, help="default C/8")
    parser.add_argument("--threshold", type=float, default=0.10, help="PPL increase (0.10)")
    parser.add_argument("--seed", type=int, default=1234)
    parser.add_argument("--block-size", type=int, default=None, help="Λ query block")
    parser.add_argument("--chunk", type=int, default=1024, help="LM-head positions per chunk")
    parser.add_argument("--out", type=Path, default=None, help="run folder")
    parser.add_argument(
        "--decompose",
        action="store_true",
        help="also fit each head's logits as a[i-j] + b[i] + c[j] on the same ids under the "
        "same forward, per (scheme, document), and report r before/past C per layer beside "
        "the drift (needs max length > C; about one more forward plus the fit per document; "
        "under lambda the fit covers its local band, see docs/length.md)",
    )
    parser.add_argument(
        "--quick",
        action="store_true",
        help="embedded model, 2 documents, F = 2, schemes none;lambda:4,C;scale:2",
    )
    add_loading_arguments(parser)


def _fail(message: str) -> PlanError:
    return PlanError(message)


def check_arguments(args: argparse.Namespace) -> tuple[ModelEntry, str | None, Iterator[Document]]:
    """Every argument checked before the model (or the embedded model's conversion) is
    touched: numbers, schemes, the output folder, the device, the model entry and the
    documents' source (opened, read later)."""
    from posgen.harness.length.documents import open_documents
    from posgen.harness.loading import check_device, model_entries, require_rope
    from posgen.harness.out_folder import check_out_folder

    if args.quick:
        if args.max_length is not None or args.factor not in (None, 2.0):
            raise _fail("--quick fixes F = 2; drop --max-length/--factor")
        args.model = "embedded"
    for flag, value, low in (
        ("--max-length", args.max_length, 2),
        ("--trained-context", args.trained_context, 2),
        ("--documents", args.documents, 1),
        ("--bucket-width", args.bucket_width, 1),
        ("--block-size", args.block_size, 1),
        ("--chunk", args.chunk, 1),
    ):
        if value is not None and value < low:
            raise _fail(f"{flag} must be an integer >= {low}, got {value}")
    if args.factor is not None and not (math.isfinite(args.factor) and args.factor > 0):
        raise _fail(f"--factor must be a finite number > 0, got {args.factor}")
    if not (math.isfinite(args.threshold) and args.threshold > 0):
        raise _fail(f"--threshold must be a finite number > 0, got {args.threshold}")
    if not 0 <= args.seed < 2**32:
        raise _fail(f"--seed must be an integer in [0, 2**32), got {args.seed}")
    _check_specs(args)
    if args.out is not None:
        check_out_folder(args.out)
    device = check_device(args.device)
    if args.documents is not None and args.documents > ALL_DOCUMENTS and _builtin(args):
        raise _fail(f"--documents must be in [1, {ALL_DOCUMENTS}] with the built-in documents")
    documents = open_documents(args.data, args.dataset, args.text_field)
    (entry,) = model_entries([args.model], args)
    require_rope(entry, "posgen length")
    return entry, device, documents


def _builtin(args: argparse.Namespace) -> bool:
    return args.data is None and args.dataset is None


def resolve_config(args: argparse.Namespace, trained: int, entry: ModelEntry | None = None):
    """The :class:`LengthRunConfig` from the arguments and the model's trained context
    (documents are filled in once they are selected)."""
    from posgen.harness.length.runner import LengthRunConfig
    from posgen.perturbations.length import parse_length_list

    c = args.trained_context or trained
    factor = 2.0 if args.factor is None else args.factor
    max_length = args.max_length if args.max_length is not None else round(factor * c)
    f_text = f"{max_length / c:g}"
    if args.schemes:
        text = with_context(args.schemes, c)
    elif args.quick:
        text = with_context(QUICK_SCHEMES, c)
    else:
        text = f"none;lambda:4,{c};scale:{f_text};yarn:{f_text}"
    try:
        schemes = parse_length_list(text)
        return LengthRunConfig(
            model=entry.label if entry else args.model,
            max_length=max_length,
            trained_context=c,
            schemes=tuple(s.to_string() for s in schemes),
            documents=("?",),
            bucket_width=args.bucket_width or max(1, c // 8),
            positions=args.positions,
            seed=args.seed,
            chunk=args.chunk,
            block_size=args.block_size,
            threshold=args.threshold,
            model_entry=entry.to_dict() if entry else {},
            decompose=bool(getattr(args, "decompose", False)),
        )
    except (ValueError, PerturbationError) as exc:
        raise _fail(str(exc)) from None


def check_decompose(config) -> None:
    """``--decompose`` needs tokens past C (it compares the fit before and past C)."""
    if not config.decompose:
        return
    if config.max_length <= config.trained_context:
        raise _fail(
            f"--decompose compares the fit before and past C = {config.trained_context}: "
            f"it needs a max length > C, got {config.max_length}"
        )


def _check_specs(args: argparse.Namespace) -> None:
    """Refuse bad scheme strings before any model or config is read."""
    from posgen.perturbations import parse
    from posgen.perturbations.length import parse_length_list

    try:
        if args.schemes:
            parse_length_list(with_context(args.schemes, 2))
        if args.positions:
            parse("position", args.positions)
    except PerturbationError as exc:
        raise _fail(str(exc)) from None


def main(args: argparse.Namespace) -> int:
    from posgen.results.folder.store import RunConflictError

    try:
        entry, device, documents = check_arguments(args)
        folder = run_length(args, entry, device, documents)
    except (PlanError, RunConflictError) as e:
        print(f"posgen length: {e}", file=sys.stderr)
        return 2
    print(f"posgen length: wrote {folder}")
    return 0


def _trained_context(args: argparse.Namespace, entry: ModelEntry) -> int:
    """C: ``--trained-context``, else the config's ``max_position_embeddings``."""
    from posgen.harness.loading import load_config

    trained = getattr(load_config(entry), "max_position_embeddings", None)
    if args.trained_context is None and trained is None:
        raise _fail("the model config has no max_position_embeddings; pass --trained-context")
    return int(args.trained_context or trained)


def _select_documents(
    args: argparse.Namespace, entry: ModelEntry, config, documents: Iterator[Document]
):
    """The run's documents (tokenized, cut to max length), and the config naming them."""
    from posgen.harness.length.documents import describe_shortfall, records
    from posgen.harness.length.documents import select as select_documents
    from posgen.harness.loading import load_tokenizer

    wanted = args.documents
    if wanted is None and (args.quick or _builtin(args)):
        wanted = QUICK_DOCUMENTS if args.quick else ALL_DOCUMENTS
    tokenizer = load_tokenizer(entry)
    sel = select_documents(documents, lambda t: tokenizer(t).input_ids, config.max_length, wanted)
    shortfall = describe_shortfall(sel, wanted, config.max_length)
    if shortfall:
        raise _fail(shortfall)
    if sel.skipped:
        print(
            f"posgen length: skipped {sel.skipped} document(s) shorter than "
            f"{config.max_length} tokens",
            file=sys.stderr,
        )
    config = replace(
        config,
        documents=tuple(d.doc_id for d in sel.documents),
        document_sources=records(sel.documents),
        skipped_documents=sel.skipped,
    )
    return config, sel.token_ids


def run_length(
    args: argparse.Namespace,
    entry: ModelEntry,
    device: str | None,
    documents: Iterator[Document] | None = None,
) -> Path:
    """The whole run of checked arguments: config, documents, folder, records, scores."""
    from posgen.atomic import atomic_write_bytes, atomic_write_text
    from posgen.harness.length.runner import prepare_folder, read_results, run_documents
    from posgen.results.folder.store import atomic_write_json
    from posgen.results.report.length import curves_png, markdown
    from posgen.results.scores.length import json_ready, score_length

    config = resolve_config(args, _trained_context(args, entry), entry)
    check_decompose(config)
    if documents is None:
        from posgen.harness.length.documents import builtin_documents

        documents = builtin_documents()
    config, token_ids = _select_documents(args, entry, config, documents)
    body = json.dumps(config.scored_dict(), sort_keys=True).encode()  # --decompose: same folder
    folder = args.out or Path("posgen-runs") / f"length-{hashlib.sha256(body).hexdigest()[:12]}"
    prepare_folder(folder, config)
    try:
        run_documents(folder, config, entry, device, token_ids)
    except ValueError as exc:
        raise _fail(str(exc)) from None
    scores = score_length(read_results(folder, config), config.to_dict())
    if config.decompose:
        _add_decomposition(folder, config, scores)
    atomic_write_json(folder / "length_scores.json", json_ready(scores))
    atomic_write_bytes(folder / "length_curves.png", curves_png(scores))
    text = markdown(scores)
    atomic_write_text(folder / "length.md", text)
    print(text)
    return folder


def _add_decomposition(folder: Path, config, scores: dict) -> None:
    """``scores["decomposition"]`` from the folder's decomposition records, and its figure."""
    from posgen.atomic import atomic_write_bytes
    from posgen.results.report.length_decompose import decomposition_png
    from posgen.results.scores.length_decompose import decomposition_scores, read_decompositions

    schemes = [s.to_string() for s in config.parsed_schemes()]
    records = read_decompositions(folder, schemes, list(config.documents))
    scores["decomposition"] = decomposition_scores(records, scores["drift"])
    atomic_write_bytes(folder / "length_decomposition.png", decomposition_png(scores))


def run_for_models(
    run_root: Path, entries: list[ModelEntry], schemes: str, device: str | None = None
) -> dict[str, Path]:
    """``posgen run --length``: a length run per (non random-init) model of a sweep into
    ``RUN/length/<model>/``, each loaded as the sweep loaded it (dtype, revision, adapter,
    remote code, attention implementation, device map) on ``device``; then the sweep's
    report is rebuilt to include it."""
    from posgen.results.folder.store import slug
    from posgen.results.report.build import regenerate

    parser = argparse.ArgumentParser()
    configure_parser(parser)
    for entry in entries:
        if entry.random_init:
            continue  # the twin has no trained context to extrapolate from
        out = run_root / "length" / slug(entry.label)
        argv = ["--out", str(out)]
        if schemes == "quick":
            argv += ["--documents", str(QUICK_DOCUMENTS), "--schemes", QUICK_SCHEMES]
        else:
            argv += ["--schemes", schemes]
        args = parser.parse_args(argv)
        run_length(args, entry, device)
    return regenerate(run_root)
