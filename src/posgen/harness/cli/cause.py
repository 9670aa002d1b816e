"""``posgen cause``: does the additive form of the attention logits explain the tolerance?

One model load: the posgen_prose documents scored plainly and with every layer's (then
each layer's) logits replaced by their exact additive fit, its distance term alone and its
key term alone (``hf-posgen logits=``), the controls (the distance term of another
sequence, the residual shuffled); the logit change each position scheme causes, measured
and predicted by the fit (not on a learned-absolute model: its positions enter once,
before the first layer); with ``--layers-run`` the within-model relation of the predicted
change to ``posgen layers``' sensitivity; a report. ``--combine RUN...`` draws finished
cause folders into one report with the cross-model section, loading nothing. See
docs/cause.md.
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
    from posgen.results.folder.cause_config import CauseConfig

DEFAULT_FORMS = "additive;distance;key"
DEFAULT_CONTROLS = "foreign;shuffled"
DEFAULT_SCHEMES = "swap:0.05;swap:0.2"
DEFAULT_LIMIT = 12  # posgen layers' documents


def configure_parser(parser: argparse.ArgumentParser) -> None:
    add_profile_arguments(parser, DEFAULT_LIMIT)
    parser.add_argument(
        "--layers", help="layers replaced one at a time: 12, 0-5 or 3;7;11 (default: every layer)"
    )
    parser.add_argument(
        "--forms",
        default=DEFAULT_FORMS,
        help=f"';'-separated logits= forms, each in every layer and in one layer at a time "
        f"(default {DEFAULT_FORMS}; 'none': no per-layer cells)",
    )
    parser.add_argument(
        "--controls",
        default=DEFAULT_CONTROLS,
        help=f"forms run in every layer only (default {DEFAULT_CONTROLS}; 'none')",
    )
    parser.add_argument(
        "--positions",
        default=None,
        help=f"';'-separated position schemes whose logit change is predicted "
        f"(default {DEFAULT_SCHEMES}; a learned-absolute model gets no prediction: refused)",
    )
    parser.add_argument(
        "--layers-run",
        type=Path,
        metavar="DIR",
        help="a finished `posgen layers` folder of the same model, seed and --limit: relate "
        "its per-layer sensitivity to the predicted change under its scheme (remembered: a "
        "rerun of the folder without it relates to the same one)",
    )
    add_folder_arguments(parser, "cause", "with the cross-model section")


# what each ';'-separated flag takes, named when it is given empty
NAMES_FORMS = {
    "forms": f"';'-separated forms ({DEFAULT_FORMS}), or 'none' for no per-layer cells",
    "controls": f"';'-separated forms ({DEFAULT_CONTROLS}), or 'none' for no controls",
    "positions": f"';'-separated position schemes ({DEFAULT_SCHEMES})",
}


def _names(text: str, what: str) -> list[str]:
    """The names of a ';'-separated flag (``none``: no names); an empty one is refused
    (it would silently mean no forms, or no controls)."""
    parts = [p.strip() for p in text.split(";") if p.strip()]
    if not parts:
        raise InputError(f"--{what} {text!r}: give {NAMES_FORMS[what]}")
    if parts == ["none"]:
        return []
    if len(set(parts)) != len(parts):
        raise InputError(f"--{what} {text}: a name is given twice")
    return parts


def _forms(args: argparse.Namespace) -> tuple[list[str], list[str]]:
    from posgen.harness.model_side.logits.forms import LogitForm

    forms, controls = _names(args.forms, "forms"), _names(args.controls, "controls")
    for name in [*forms, *controls]:
        LogitForm(name)  # names the forms on a typo
    if "foreign" in forms:
        raise InputError(
            "--forms: foreign is a control (every layer at once); give it in --controls"
        )
    if set(forms) & set(controls):
        raise InputError("--forms and --controls name the same form twice")
    if not forms and not controls:
        raise InputError("give at least one form in --forms or --controls")
    return forms, controls


def _schemes(text: str, seed: int) -> list[str]:
    import numpy as np

    from posgen.perturbations.base import registry

    out = []
    for part in _names(text, "positions"):
        scheme = registry.parse("position", part)
        if scheme.is_identity:
            raise InputError(f"--positions {part}: moves nothing; give a rate above 0")
        if not np.issubdtype(scheme.position_values(np.arange(64), seed).dtype, np.integer):
            raise InputError(
                f"--positions {part}: gives non-integer positions; the fit's distance term "
                "a[d] is known at integer d only (give a reordering or a shift)"
            )
        out.append(scheme.to_string())
    if not out:
        raise InputError("--positions: give at least one position scheme")
    return out


def resolve(args: argparse.Namespace) -> CauseConfig:
    """The run's :class:`~posgen.results.folder.cause_config.CauseConfig`, every check done
    before the model loads (its config is read, no weights). Raises
    :class:`~posgen.harness.input_error.InputError`."""
    from posgen.harness.loading import LoadOptions, check_device, load_config, model_entries
    from posgen.harness.model_side.positions.selection import check_layers, parse_layers
    from posgen.perturbations.base import PerturbationError
    from posgen.results.folder.cause_config import CauseConfig, CauseFolder

    check_out_and_layers(args, CauseFolder)
    if args.limit < 2:
        raise InputError(f"--limit {args.limit}: need at least 2 documents for an interval")
    try:
        forms, controls = _forms(args)
        schemes = _schemes(DEFAULT_SCHEMES if args.positions is None else args.positions, args.seed)
        layers = parse_layers(args.layers)
        check_device(args.device)
        options = LoadOptions.from_args(args)
        entry = model_entries([args.model], options, random_init=args.random_init, seed=args.seed)[
            -1
        ]
        count = int(load_config(entry).get_text_config().num_hidden_layers)
        check_layers(layers, count, entry.label)
    except PerturbationError as e:
        raise InputError(str(e)) from None
    if entry.positions == "absolute":
        schemes = _no_prediction(args, entry.path)
    elif not entry.rope and entry.positions != "alibi":
        raise InputError(f"{entry.path} {_NO_LAYER_POSITIONS.get(entry.positions, _NO_ROPE)}")
    return CauseConfig(
        model=entry,
        seed=args.seed,
        limit=documents_limit(args.limit),
        layers=tuple(layers if layers is not None else range(count)) if forms else (),
        forms=tuple(forms),
        controls=tuple(controls),
        schemes=tuple(schemes),
        batch_size=args.batch_size,
    )


def _no_prediction(args: argparse.Namespace, path: str) -> list[str]:
    """No position schemes for a learned-absolute model: its positions enter once, before
    the first layer, so no layer's positions move alone and there is no prediction (its
    ``logits=`` cells run). ``--positions`` or ``--layers-run`` given are refused."""
    for flag, given in (("--positions", args.positions), ("--layers-run", args.layers_run)):
        if given is not None:
            raise InputError(
                f"{flag}: {path} has learned absolute positions, which enter once before the "
                "first layer: no layer's positions move alone, so posgen cause predicts no "
                f"change for it (its logits= cells run); drop {flag}"
            )
    return []


_NO_ROPE = (
    "has no rotary position embedding: the predicted change of a position scheme moves one "
    "layer's positions, which needs RoPE or ALiBi (BLOOM's, MPT's or Falcon's)"
)
_NO_LAYER_POSITIONS = {
    "none": "has no position encoding (the causal mask is its only order signal): there "
    "are no positions to move",
}


def combine_main(args: argparse.Namespace) -> int:
    from posgen.results.report.combine import combine_cause

    return combine_command(args, "cause", configure_parser, combine_cause)


def main(args: argparse.Namespace) -> int:
    if args.combine is not None:
        return combine_main(args)
    import time

    from posgen.harness.cause.runner import run
    from posgen.harness.cli.driver import default_out, resolved, say, write_folder
    from posgen.harness.loading import require_compatible
    from posgen.results.folder.cause_config import CauseFolder
    from posgen.results.report.folder_reports import regenerate_cause
    from posgen.results.scores.cause_profile import LayersRunError, check_layers_run

    def resolve_all() -> CauseConfig:
        config = resolve(args)
        require_compatible([config.model])  # posgen.compat, before the first cell
        if args.layers_run is not None:
            check_layers_run(config, args.layers_run)
        return config

    config = resolved("cause", resolve_all, (LayersRunError,))
    if config is None:
        return 2
    note = limit_note(args.limit, config.limit)
    if note is not None:
        say("cause")(f"note: {note}")
    progress = None if args.no_progress else say("cause")

    def cells(folder: CauseFolder) -> dict[str, float]:
        folder.layers_run(args.layers_run)
        return run(folder, args.device, progress)

    start = time.perf_counter()
    out = args.out or default_out("cause", config.model.label, "posgen-cause")
    done = write_folder(
        "cause", CauseFolder, out, config, cells, regenerate_cause, (LayersRunError,)
    )
    if done is None:
        return 2
    _, timings, paths = done
    steps = sum(v for k, v in timings.items() if k != "prediction")
    made = f"prediction {timings.get('prediction', 0):.1f} s" if config.schemes else "no prediction"
    print(
        f"posgen cause: {len(timings)} step(s) in {time.perf_counter() - start:.1f} s "
        f"(cells {steps:.1f} s, {made}); report in {paths['md']}"
    )
    return 0
