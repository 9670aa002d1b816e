"""``posgen layers``: degradation when positions are perturbed in one layer at a time.

One model load: the posgen_prose documents scored plainly, with the scheme in each chosen
layer alone, and in every layer at once; then the decomposition of the same weights, a
within-model relation test of sensitivity against fit quality (and drift past the trained
context, given a ``posgen length`` folder), a table and a figure. ``--combine RUN...``
draws finished layers folders (several models) into one report, loading nothing. See
docs/layers.md.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING

from posgen.harness.cli.arguments import (
    add_folder_arguments,
    add_profile_arguments,
    check_out_and_layers,
    combine_command,
    documents_limit,
    limit_note,
)
from posgen.harness.input_error import InputError

if TYPE_CHECKING:
    from posgen.results.folder.layers_config import LayersConfig

DEFAULT_POSITIONS = "swap:0.2"
DEFAULT_LIMIT = 12  # posgen run's default posgen_prose documents
DEFAULT_DECOMPOSE_TOKENS = 256  # posgen decompose's


def configure_parser(parser: argparse.ArgumentParser) -> None:
    add_profile_arguments(parser, DEFAULT_LIMIT)
    parser.add_argument(
        "--positions",
        default=DEFAULT_POSITIONS,
        help=f"position scheme put in one layer at a time (default {DEFAULT_POSITIONS}; "
        "'none' with --features)",
    )
    parser.add_argument("--features", help="feature scheme instead or as well, e.g. rope_noise:1")
    parser.add_argument(
        "--layers", help="layers to profile: 12, 0-5 or 3;7;11 (default: every layer)"
    )
    parser.add_argument(
        "--heads",
        action="store_true",
        help="one cell per query head of each chosen layer (hf-posgen heads=); with "
        "--layers to keep it short",
    )
    parser.add_argument(
        "--decompose-docs",
        type=int,
        default=8,
        help="probe windows of the decomposition (8; 0: no fit-quality relation)",
    )
    parser.add_argument(
        "--decompose-tokens",
        type=int,
        default=None,
        help=f"tokens per window ({DEFAULT_DECOMPOSE_TOKENS}, held to the positions MPT's "
        "ALiBi bias covers; a value past them is refused)",
    )
    parser.add_argument(
        "--length-run",
        type=Path,
        metavar="DIR",
        help="a `posgen length` folder of the same model with scheme 'none': relate "
        "sensitivity to attention-output drift past the trained context",
    )
    add_folder_arguments(
        parser, "layers", "a panel and a section per folder, e.g. of several models"
    )


def resolve(args: argparse.Namespace) -> LayersConfig:
    """The run's :class:`~posgen.results.folder.layers_config.LayersConfig`, every check
    done before the model loads (its config is read, no weights): numbers, schemes,
    ``--layers``, ``--length-run`` (its drift of the plain model read now), the device and
    the model. Raises :class:`~posgen.harness.input_error.InputError`."""
    from posgen.harness.loading import LoadOptions, check_device, model_entries
    from posgen.harness.model_side.perturbation import ModelPerturbation
    from posgen.harness.model_side.positions.selection import check_layers, parse_layers
    from posgen.perturbations.base import PerturbationError
    from posgen.results.folder.config import Decompose
    from posgen.results.folder.layers_config import LayersConfig, LayersFolder

    check_out_and_layers(args, LayersFolder)
    if args.limit < 2:
        raise InputError(f"--limit {args.limit}: need at least 2 documents for an interval")
    if args.decompose_docs < 0 or (args.decompose_tokens or 8) < 8:
        raise InputError("--decompose-docs must be >= 0 and --decompose-tokens >= 8")
    _check_schemes_given(args)
    if args.length_run is not None:
        _check_length_run(args.length_run)
    try:
        spec = ModelPerturbation.parse(args.positions, args.features, args.seed)
        if not spec.changes_model:
            raise InputError("give a position or feature scheme that changes the model")
        layers = parse_layers(args.layers)
        check_device(args.device)
        options = LoadOptions.from_args(args)
        entry = model_entries([args.model], options, random_init=args.random_init, seed=args.seed)[
            -1
        ]
        text = _checked_family(entry, spec).get_text_config()
        count, n_heads = int(text.num_hidden_layers), int(text.num_attention_heads)
        check_layers(layers, count, entry.label)
    except PerturbationError as e:
        raise InputError(str(e)) from None
    return LayersConfig(
        model=entry,
        positions=None if spec.positions is None else spec.positions.to_string(),
        features=None if spec.features is None else spec.features.to_string(),
        seed=args.seed,
        limit=documents_limit(args.limit),
        layers=tuple(layers if layers is not None else range(count)),
        batch_size=args.batch_size,
        decompose=Decompose(args.decompose_docs, _decompose_tokens(args, entry)),
        heads=n_heads if args.heads else None,  # query heads per layer
    )


def _checked_family(entry, spec):
    """The model's config (no weights), once its position family is checked: positions
    that enter each layer (RoPE, ALiBi) and the schemes it takes (``qk_noise`` moves RoPE's
    rotated queries and keys: refused on ALiBi, as hf-posgen refuses it)."""
    from types import SimpleNamespace

    from posgen.harness.loading import require_rope
    from posgen.harness.model_side.family_checks import check_schemes

    if entry.positions != "alibi":  # an ALiBi bias takes positions per layer too
        _require_per_layer_positions(entry, require_rope)
    model_config = _model_config(entry)
    given = (("--positions", spec.positions), ("--features", spec.features))
    what = " and ".join(f"{flag} {s.to_string()}" for flag, s in given if s is not None)
    check_schemes(SimpleNamespace(config=model_config), spec, what)
    return model_config


def _decompose_tokens(args: argparse.Namespace, entry) -> int:
    """``--decompose-tokens``: as given, refused past the positions one forward of the
    model takes (MPT's ``max_seq_len``, read from its config), or the default held to
    them, noted in ``args.tokens_note``."""
    from posgen.harness import loading

    if not args.decompose_docs:
        args.tokens_note = None
        return args.decompose_tokens or DEFAULT_DECOMPOSE_TOKENS
    limit = loading.position_limit(entry)
    tokens, args.tokens_note = loading.held_to_limit(
        entry.path, limit, "--decompose-tokens", args.decompose_tokens, DEFAULT_DECOMPOSE_TOKENS
    )
    return tokens


# what --positions and --features take, named when one is given empty
SCHEME_FORMS = {
    "positions": "a position scheme (e.g. swap:0.2), or 'none' with --features",
    "features": "a feature scheme (e.g. rope_noise:1), or leave --features out",
}


def _check_schemes_given(args: argparse.Namespace) -> None:
    """Refuse an empty ``--positions ''`` or ``--features ''`` (it would silently mean no
    scheme)."""
    for name, what in SCHEME_FORMS.items():
        value = getattr(args, name)
        if value is not None and not value.strip():
            raise InputError(f"--{name} '': give {what}")


def _check_length_run(folder: Path) -> None:
    """``--length-run``: a finished length folder with the plain model's drift."""
    from posgen.results.folder.schema import SchemaError
    from posgen.results.scores.layers_profile import read_drift

    if not (folder / "length_scores.json").is_file():
        raise InputError(f"--length-run {folder}: no length_scores.json there")
    try:
        read_drift(folder)
    except (SchemaError, ValueError) as e:
        raise InputError(f"--length-run {e}") from None


def _model_config(entry):
    """The model's transformers config (no weights), looked up at call time."""
    from posgen.harness import loading

    return loading.load_config(entry)


def combine_main(args: argparse.Namespace) -> int:
    from posgen.results.report.combine import combine_layers

    return combine_command(args, "layers", configure_parser, combine_layers)


def main(args: argparse.Namespace) -> int:
    if args.combine is not None:
        return combine_main(args)
    import time

    from posgen.harness.cli.driver import default_out, resolved, say, write_folder
    from posgen.harness.layers.runner import run
    from posgen.harness.loading import require_compatible
    from posgen.results.folder.layers_config import LayersFolder
    from posgen.results.report.folder_reports import regenerate_layers

    def resolve_all() -> LayersConfig:
        config = resolve(args)
        require_compatible([config.model])  # posgen.compat, before the first cell
        return config

    config = resolved("layers", resolve_all)
    if config is None:
        return 2
    for note in (limit_note(args.limit, config.limit), args.tokens_note):
        if note is not None:
            say("layers")(f"note: {note}")
    progress = None if args.no_progress else say("layers")

    def cells(folder: LayersFolder) -> dict[str, float]:
        folder.length_run(args.length_run)
        return run(folder, args.device, progress=progress)

    start = time.perf_counter()
    out = args.out or default_out("layers", config.model.label, "posgen-layers")
    done = write_folder("layers", LayersFolder, out, config, cells, regenerate_layers)
    if done is None:
        return 2
    _, timings, paths = done
    steps = sum(v for k, v in timings.items() if k != "decomposition")
    print(
        f"posgen layers: {len(timings)} step(s) in {time.perf_counter() - start:.1f} s "
        f"(cells {steps:.1f} s, decomposition {timings.get('decomposition', 0):.1f} s); "
        f"report in {paths['md']}"
    )
    return 0


def _require_per_layer_positions(entry, require_rope) -> None:
    """Refuse, in one line, a model whose positions do not enter each layer: learned
    absolute ones enter once, before the first layer; a model without any has none."""
    if entry.positions == "absolute":
        raise InputError(
            f"{entry.path} has learned absolute positions, which enter once before the first "
            "layer: there is no per-layer position to perturb (posgen run and posgen "
            "decompose apply)"
        )
    if entry.positions == "none":
        raise InputError(
            f"{entry.path} has no position encoding (the causal mask is its only order "
            "signal): there are no positions to perturb"
        )
    require_rope(entry, "posgen layers")
