"""``posgen decompose``: the decomposition of one model (and its random-init twin) on the
probe text, with its tables and plots."""

from __future__ import annotations

import argparse
from pathlib import Path

from posgen.harness import loading  # loading.load_config, looked up at call time
from posgen.harness.decomposition.probe import DEFAULT_DOCS, DEFAULT_TOKENS  # light
from posgen.harness.input_error import InputError
from posgen.harness.loading import (
    LoadOptions,
    add_loading_arguments,
    check_device,
    default_device,
    held_to_limit,
    model_entries,
    require_rope,
)
from posgen.harness.out_folder import check_out_folder


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
        default=None,
        help=f"tokens per window, n (default {DEFAULT_TOKENS}, held to the positions a "
        "learned position table or MPT's ALiBi bias covers; a value past them is refused)",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random-init twin")
    parser.add_argument(
        "--length",
        default=None,
        help="run the model under one length scheme of posgen length: none, scale:F, yarn:F, "
        "lambda:G,W or infllm[:KEY=VALUE,...] (C in it stands for the trained context; default: as trained); the table "
        "then gets r before/past the trained context C (needs --tokens > C). Under lambda:G,W "
        "the fit covers "
        "Lambda's local band (keys at distance < W, fit_mask lambda-band:W), not its G global "
        "keys; under infllm its local window (n_local), not its memory",
    )
    parser.add_argument(
        "--trained-context",
        type=_positive,
        default=None,
        help="C (>= 2) for the past-context figures (default: the config's "
        "max_position_embeddings); they are computed when --tokens > C, and --length or "
        "--trained-context asks for them (then --tokens must be > C)",
    )
    parser.add_argument(
        "--experiments",
        action="store_true",
        help="also run controlled distance and the q/k pattern (and on the "
        "random-init twin with --random-init)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        help="output folder (default posgen-runs/decompose/<model>); a rerun with the same "
        "settings resumes, other settings are refused",
    )
    add_loading_arguments(parser)


def _parse_length(text: str, context: int | None):
    """``--length``: one length scheme, ``C`` in it read as the trained context (a stand-in
    value when ``context`` is None: syntax only)."""
    from posgen.perturbations.base import PerturbationError
    from posgen.perturbations.length import parse_in_context

    if ";" in text:
        n = len([t for t in text.split(";") if t.strip()])
        raise InputError(
            f"--length {text!r}: one scheme only (got {n}); run posgen decompose once per "
            "scheme, or posgen length --decompose for several"
        )
    try:
        return parse_in_context(text, 2 if context is None else context)
    except (PerturbationError, ValueError) as exc:
        raise InputError(f"--length: {exc}") from None


def _resolve_length(args: argparse.Namespace, entry, context: int | None):
    """The length scheme of ``--length`` with ``C`` = the trained context (known whenever
    ``--length`` is given, see :func:`_context`), or None; refused where Λ cannot run the
    model (read from its config)."""
    if args.length is None:
        return None
    from posgen.harness.model_side.attention.length import config_refusal
    from posgen.perturbations.base import PerturbationError

    assert context is not None
    scheme = _parse_length(args.length, context)
    if hasattr(scheme, "for_context"):  # infllm: its defaults scaled to C
        try:
            scheme = scheme.for_context(context)
        except PerturbationError as exc:
            raise InputError(f"--length: {exc}") from None
    if scheme.uses_attention:
        reason = config_refusal(scheme, loading.load_config(entry))
        if reason is not None:
            raise InputError(f"--length {scheme.to_string()}: {reason}")
    return scheme


def _context(args: argparse.Namespace, entry) -> int | None:
    """C for the past-context figures (config only, no weights), or None when not asked
    for (``--length``, ``--trained-context``) and ``--tokens`` does not pass it."""
    trained = getattr(loading.load_config(entry), "max_position_embeddings", None)
    c = args.trained_context or trained
    if c is None:
        if _asked_for_context(args):
            raise InputError(
                "the model config has no max_position_embeddings; pass --trained-context"
            )
        return None
    return c if _asked_for_context(args) or args.tokens > c else None


def _asked_for_context(args: argparse.Namespace) -> list[str]:
    """The flags that ask for the past-context figures."""
    flags = (("--length", args.length), ("--trained-context", args.trained_context))
    return [flag for flag, value in flags if value is not None]


def _check_tokens_past(args: argparse.Namespace, context: int | None) -> None:
    """Asked for, the past-context figures need ``--tokens`` > C (else every past-C
    column would be empty)."""
    asked = _asked_for_context(args)
    if asked and context is not None and args.tokens <= context:
        raise InputError(
            f"{' and '.join(asked)}: the past-context figures compare the fit before and "
            f"past C = {context}: they need --tokens > C, got {args.tokens} (every past-C "
            "column would be empty)"
        )


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def check_probe_size(docs: int, tokens: int) -> None:
    """Refuse more tokens than the probe text can hold for any tokenizer (before the
    tokenizer loads): a token covers at least one byte, and each paragraph, tokenized on
    its own, may add one marker token and its paragraph break two more."""
    from posgen.harness.decomposition.probe import probe_text

    text = probe_text()
    bound = len(text.encode("utf-8")) + 3 * (text.count("\n\n") + 1)
    if docs * tokens > bound:
        raise InputError(
            f"--docs {docs} × --tokens {tokens} = {docs * tokens} tokens: the probe text "
            f"({len(text.encode('utf-8'))} bytes) holds fewer than {bound} tokens for any "
            "tokenizer; lower --docs or --tokens"
        )


def check_probe_windows(entry, docs: int, tokens: int) -> None:
    """Refuse windows the probe text cannot fill with this model's tokenizer (it loads,
    no weights)."""
    from posgen.harness.decomposition.probe import probe_token_windows

    try:
        probe_token_windows(loading.load_tokenizer(entry), docs=docs, tokens=tokens)
    except ValueError as e:
        raise InputError(str(e)) from None


def check_arguments(args: argparse.Namespace):
    """Every argument checked before any model loads: the model entry, the device, the
    trained context C of the past-context figures (None when they are not asked for) and
    the length scheme (None without ``--length``). ``args.tokens`` is set: the default
    held to the positions the model takes in one forward (:func:`_tokens`)."""
    if not 0 <= args.seed < 2**32:
        raise InputError(f"--seed must be an integer in [0, 2**32), got {args.seed}")
    if args.trained_context is not None and args.trained_context < 2:
        raise InputError(f"--trained-context must be an integer >= 2, got {args.trained_context}")
    if args.length is not None:
        _parse_length(args.length, None)
    check_probe_size(args.docs, args.tokens or DEFAULT_TOKENS)
    if args.out is not None:
        from posgen.results.folder.decompose_config import DecomposeFolder

        check_out_folder(args.out, folder=DecomposeFolder)
    device = check_device(args.device)
    (entry,) = model_entries([args.model], LoadOptions.from_args(args))
    _require_family(entry, args)
    _tokens(args, entry)
    context = _context(args, entry)
    length = _resolve_length(args, entry, context)
    _check_tokens_past(args, context)
    return entry, device, context, length


def _tokens(args: argparse.Namespace, entry) -> None:
    """``args.tokens``: as given, refused past the positions one forward of the model
    takes (a learned table's rows, MPT's ``max_seq_len``: read from its config), or the
    default held to them, noted in ``args.tokens_note``."""
    limit = loading.position_limit(entry)
    args.tokens, args.tokens_note = held_to_limit(
        entry.path, limit, "--tokens", args.tokens, DEFAULT_TOKENS
    )


def _require_family(entry, args: argparse.Namespace) -> None:
    """A RoPE model takes everything; a learned-absolute, ALiBi (BLOOM, MPT, Falcon) or
    position-free one
    (:mod:`posgen.harness.model_side.family`) the fit alone: no ``--length`` (rotary
    schemes), no ``--experiments`` (RoPE's controlled distance and phase measures)."""
    from posgen.harness.model_side.family import family_of_folder

    family = family_of_folder(entry.path)
    if family is None or family.kind == "rotary":
        require_rope(entry, "posgen decompose")
        return
    if family.logits_refused:
        raise InputError(f"{entry.path}: {family.logits_refused}")
    for flag, given in (("--length", args.length), ("--experiments", args.experiments)):
        if given:
            raise InputError(
                f"{flag} measures RoPE models; {entry.path} has {family.kind} positions"
            )


def resolve(args: argparse.Namespace):
    """The run's :class:`~posgen.results.folder.decompose_config.DecomposeConfig` and the
    device, every check done before any weights load (the model's config and tokenizer
    are read). Raises :class:`~posgen.harness.input_error.InputError`."""
    from posgen.results.folder.decompose_config import DecomposeConfig

    entry, device, context, length = check_arguments(args)
    check_probe_windows(entry, args.docs, args.tokens)
    loading.require_compatible([entry])  # posgen.compat, before any weights load
    config = DecomposeConfig(
        model=entry,
        random_init=args.random_init,
        docs=args.docs,
        tokens=args.tokens,
        seed=args.seed,
        trained_context=context,
        length=None if length is None else length.to_string(),
        experiments=args.experiments,
    )
    return config, device or default_device()


def main(args: argparse.Namespace) -> int:
    from posgen.harness.cli.driver import default_out, resolved, say, write_folder
    from posgen.harness.decomposition.runner import run
    from posgen.results.folder.decompose_config import DecomposeFolder
    from posgen.results.report.folder_reports import decompose_text, regenerate_decompose

    found = resolved("decompose", lambda: resolve(args))
    if found is None:
        return 2
    config, device = found
    if args.tokens_note:
        say("decompose")(f"note: {args.tokens_note}")
    out = args.out or default_out("decompose", config.model.label)
    done = write_folder(
        "decompose",
        DecomposeFolder,
        out,
        config,
        lambda folder: run(folder, device, say("decompose")),
        regenerate_decompose,
    )
    if done is None:
        return 2
    folder = done[0]
    if config.experiments:
        for name, rows in folder.read_cell("experiments").items():
            print(f"{name}:\n{pd_table(rows)}")
    print(decompose_text(folder))
    print(f"posgen decompose: wrote {out}")
    return 0


def pd_table(rows: list[dict]) -> str:
    """Records as pandas prints a frame (no index)."""
    import pandas as pd

    return pd.DataFrame(rows).to_string(index=False)
