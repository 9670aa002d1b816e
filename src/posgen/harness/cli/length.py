"""``posgen length``: NLL by position past the trained context, per length scheme.

Examples::

    posgen length --quick                      # embedded model, 2 documents, F = 1.5, 4 schemes
    posgen length --model PATH --factor 2 --schemes "none;lambda:4,4096;yarn:2"
    posgen length --max-length 16384 --positions swap:0.05
    posgen length --factor 2 --schemes "none;scale:2;yarn:2" --decompose
    posgen length --window-stride 1024         # window context C - 1024 ... C - 1 (default C/2)
    posgen length --documents 1 --schemes "lambda:4,C;infllm" --decompose

Schemes are ``;``-separated (``lambda`` takes ``GLOBAL,WINDOW``; ``infllm`` takes
``KEY=VALUE`` pairs, the rest InfLLM's defaults scaled to C; ``C`` stands for the
trained context). The trained context C is the model config's ``max_position_embeddings``
(MPT: its ``max_seq_len``) unless ``--trained-context`` overrides it (the override sets
buckets, the reference range and the default schemes; a rope scaling still reads the
config's own value).
:func:`resolve` checks every argument and the model's config (no weights) and builds the
run's :class:`~posgen.results.folder.length_config.LengthConfig`; the run itself is
:func:`posgen.harness.length.job.run_job`. Output: a resumable folder under
``posgen-runs/length/<model>_<hash of the scored config>`` (see
:mod:`posgen.harness.length.runner`).
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING

from posgen.harness.input_error import InputError
from posgen.harness.loading.options import add_loading_arguments

if TYPE_CHECKING:
    from posgen.harness.length.job import LengthJob

QUICK_HELP = "embedded model, 2 documents, F = 1.5, schemes none;lambda:4,C;infllm;scale:2"


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default="embedded",
        help="a local folder, a hub id, or 'embedded' (SmolLM2-135M, the default)",
    )
    size = parser.add_mutually_exclusive_group()
    size.add_argument(
        "--max-length", type=int, default=None, help="tokens per document, > C (default F × C)"
    )
    size.add_argument(
        "--factor", type=float, default=None, help="max length = F × C, F > 1 (default 2)"
    )
    parser.add_argument("--trained-context", type=int, default=None, help="override C")
    parser.add_argument(
        "--schemes",
        default=None,
        help="';'-separated length schemes: none, lambda:G,W, infllm[:KEY=VALUE,...] "
        "(n_init, n_local, block_size, topk, repr_topk, exc_block_size; the rest "
        "InfLLM's defaults scaled to C), scale:F, dynamic:F, yarn:F; C stands for the "
        "trained context (default: none;lambda:4,C;scale:F;yarn:F). hf-posgen's length= "
        "in lm_eval's --model_args takes ':' for each ',' (lambda:4:8192, "
        "infllm:topk=2:n_local=64)",
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
    _add_window_argument(parser)
    parser.add_argument("--out", type=Path, default=None, help="run folder")
    parser.add_argument(
        "--decompose",
        action="store_true",
        help="also fit each head's logits as a[i-j] + b[i] + c[j] on the same ids under the "
        "same forward, per (scheme, document), and report r before/past C per layer beside "
        "the drift (needs max length > C; about one more forward plus the fit per document; "
        "under lambda the fit covers its local band, see docs/length.md)",
    )
    parser.add_argument("--quick", action="store_true", help=QUICK_HELP)
    add_loading_arguments(parser)


def _add_window_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--window-stride",
        type=int,
        default=None,
        metavar="S",
        help="the in-distribution window pass scores every token past C with C-S ... C-1 "
        "tokens before it at positions 0 ... C-1, in windows of C tokens every S (1 <= S <= "
        "C/2, default C/2: 2 windows per document at F = 2); the effective length vs the "
        "window compares each scheme with it",
    )


def resolve(args: argparse.Namespace) -> LengthJob:
    """The checked run: every argument first, then the output folder, the device, the
    documents' source (opened, read later), the model entry and its config (no weights),
    the :class:`~posgen.results.folder.length_config.LengthConfig` and what the model's
    config rules out. Raises :class:`~posgen.harness.input_error.InputError`."""
    from posgen.harness.length.documents import open_documents
    from posgen.harness.length.job import (
        ALL_DOCUMENTS,
        QUICK_DOCUMENTS,
        LengthJob,
        check_model,
        trained_context,
    )
    from posgen.harness.loading import (
        LoadOptions,
        check_device,
        model_entries,
        require_compatible,
        require_rope,
    )
    from posgen.harness.out_folder import check_out_folder
    from posgen.results.folder.length_config import LengthFolder

    _check_numbers(args)
    _check_specs(args)
    if args.out is not None:
        check_out_folder(args.out, folder=LengthFolder)
    device = check_device(args.device)
    builtin = args.data is None and args.dataset is None
    if args.documents is not None and args.documents > ALL_DOCUMENTS and builtin:
        raise InputError(f"--documents must be in [1, {ALL_DOCUMENTS}] with the built-in documents")
    documents = open_documents(args.data, args.dataset, args.text_field)
    (entry,) = model_entries([args.model], LoadOptions.from_args(args))
    _require_length_family(entry, args, require_rope)
    model_config = _model_config(entry)
    config = _config(args, entry, trained_context(model_config, args.trained_context))
    check_model(config, model_config)
    require_compatible([entry])  # posgen.compat, before the first forward
    wanted = args.documents
    if wanted is None and (args.quick or builtin):
        wanted = QUICK_DOCUMENTS if args.quick else ALL_DOCUMENTS
    return LengthJob(entry, device, config, documents, wanted, args.out)


def _config(args: argparse.Namespace, entry, c: int):
    """The run's LengthConfig from the arguments, with trained context ``c``."""
    from posgen.harness.length.job import QUICK_FACTOR, QUICK_SCHEMES, length_config

    return length_config(
        entry,
        c,
        schemes=args.schemes or (QUICK_SCHEMES if args.quick else None),
        max_length=args.max_length,
        factor=args.factor or (QUICK_FACTOR if args.quick else None),
        bucket_width=args.bucket_width,
        positions=args.positions,
        seed=args.seed,
        chunk=args.chunk,
        block_size=args.block_size,
        threshold=args.threshold,
        decompose=args.decompose,
        window_stride=args.window_stride,
    )


def _require_length_family(entry, args: argparse.Namespace, require_rope) -> None:
    """RoPE models take every scheme. ALiBi (BLOOM, MPT, Falcon-ALiBi) and position-free
    models run past C as they are: only the scheme ``none`` applies (their own claim,
    measured), and it is the default for them. Learned absolute positions have no table
    row past C: refused. ``--decompose`` needs the family's logits captured (every built-in
    family's are; a registered one may refuse), ``--positions`` positions to move (a
    position-free model has none). MPT's ``max_seq_len`` is checked against the max length
    in :func:`posgen.harness.length.job.check_model`.
    (:mod:`posgen.harness.model_side.family`.)"""
    from posgen.harness.model_side.family import family_of_folder
    from posgen.harness.model_side.family_checks import length_refusal

    family = family_of_folder(entry.path)
    if family is None or family.kind == "rotary":
        require_rope(entry, "posgen length")
        return
    if family.kind == "absolute":
        raise InputError(f"{entry.path} {length_refusal(family, ['none'])}")
    why = length_refusal(family, (args.schemes or "none").split(";"))
    if why:
        raise InputError(f"--schemes {args.schemes}: {entry.path} {why} (the default for it)")
    if args.decompose and family.logits_refused:
        raise InputError(f"--decompose: {entry.path}: {family.logits_refused}")
    if args.positions and family.kind == "none":
        raise InputError(
            f"--positions {args.positions}: {entry.path} has no position encoding (the causal "
            "mask is its only order signal): there are no positions to move"
        )
    args.schemes = "none"


def _check_numbers(args: argparse.Namespace) -> None:
    from posgen.harness.length.job import QUICK_FACTOR

    if args.quick:
        if args.max_length is not None or args.factor not in (None, QUICK_FACTOR):
            raise InputError(f"--quick fixes F = {QUICK_FACTOR:g}; drop --max-length/--factor")
        if args.model != "embedded":
            raise InputError("--quick runs the embedded model; drop --model (or --quick)")
    for flag, value, low in (
        ("--max-length", args.max_length, 2),
        ("--trained-context", args.trained_context, 2),
        ("--documents", args.documents, 1),
        ("--bucket-width", args.bucket_width, 1),
        ("--block-size", args.block_size, 1),
        ("--chunk", args.chunk, 1),
        ("--window-stride", args.window_stride, 1),
    ):
        if value is not None and value < low:
            raise InputError(f"{flag} must be an integer >= {low}, got {value}")
    if args.factor is not None and not (math.isfinite(args.factor) and args.factor > 0):
        raise InputError(f"--factor must be a finite number > 0, got {args.factor}")
    if not (math.isfinite(args.threshold) and args.threshold > 0):
        raise InputError(f"--threshold must be a finite number > 0, got {args.threshold}")
    if not 0 <= args.seed < 2**32:
        raise InputError(f"--seed must be an integer in [0, 2**32), got {args.seed}")


def _check_specs(args: argparse.Namespace) -> None:
    """Refuse bad scheme strings (a scheme listed twice among them) before any model or
    config is read."""
    from posgen.perturbations import PerturbationError, parse
    from posgen.perturbations.length import check_length_list

    try:
        if args.schemes:
            check_length_list(args.schemes)
        if args.positions:
            parse("position", args.positions)
    except PerturbationError as exc:
        raise InputError(str(exc)) from None


def _model_config(entry):
    """The model's transformers config (no weights), looked up at call time."""
    from posgen.harness import loading

    return loading.load_config(entry)


def main(args: argparse.Namespace) -> int:
    from posgen.harness.length.job import run_job
    from posgen.results.folder.lock import RunLockedError
    from posgen.results.folder.store import RunConflictError

    def note(message: str) -> None:
        print(f"posgen length: {message}", file=sys.stderr)

    try:
        # resolve, then create (locked), run and regenerate the folder: run_job, as for
        # posgen run --length
        outcome = run_job(resolve(args), progress=print, note=note)
    except (InputError, RunConflictError, RunLockedError) as e:
        print(f"posgen length: {e}", file=sys.stderr)
        return 2
    print(outcome.markdown)
    print(f"posgen length: wrote {outcome.folder}")
    return 0
