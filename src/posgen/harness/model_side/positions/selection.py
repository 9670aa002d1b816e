"""``layers=``: which decoder layers a position or feature scheme acts in.

Forms (``--model_args`` splits at commas, so ranges and lists use ``-`` and ``;``):
``12``, ``0-5``, ``3;7;11``, ``0-3;8``; indices count from 0 in the model's decoder
stack. No torch here: the CLI checks a spec before anything heavy loads.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from posgen.harness.model_family import require_rotary
from posgen.harness.model_side.alibi.falcon_sdpa import refuse_eager
from posgen.harness.model_side.logits.forms import LogitForm
from posgen.harness.position_family import check_schemes
from posgen.perturbations.base import PerturbationError

LAYERS_FORMS = "a layer (12), a range (0-5) or ';'-separated ones (3;7;11)"


def parse_layers(
    value: str | int | Sequence[int] | None, what: str = "layers"
) -> tuple[int, ...] | None:
    """``layers=`` (or ``heads=``, ``what``) value -> sorted distinct indices (None for
    ``None``/``''``/``all``). Raises :class:`PerturbationError` naming the accepted forms."""
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "all", "none")):
        return None
    if isinstance(value, int) and not isinstance(value, bool):
        parts: list[str] = [str(value)]
    elif isinstance(value, str):
        parts = [p.strip() for p in value.split(";")]
    else:
        parts = [str(v) for v in value]
    chosen: set[int] = set()
    for part in parts:
        lo, dash, hi = part.partition("-")
        if not lo.strip().isdigit() or (dash and not hi.strip().isdigit()):
            raise PerturbationError(f"{what}={value}: {part!r} is not {LAYERS_FORMS}")
        a, b = int(lo), int(hi) if dash else int(lo)
        if b < a:
            raise PerturbationError(f"{what}={value}: range {part!r} runs backwards")
        chosen.update(range(a, b + 1))
    return tuple(sorted(chosen))


def check_layers(layers: Sequence[int] | None, count: int, what: str = "the model") -> None:
    """Raise :class:`PerturbationError` unless every index is below ``count``."""
    if layers and max(layers) >= count:
        raise PerturbationError(
            f"layers={format_layers(layers)}: {what} has {count} layers (0-{count - 1})"
        )


def format_layers(layers: Sequence[int]) -> str:
    """Short form of sorted indices, e.g. ``0-5;9`` (``parse_layers`` reads it back)."""
    runs: list[list[int]] = []
    for i in layers:
        if runs and i == runs[-1][1] + 1:
            runs[-1][1] = i
        else:
            runs.append([i, i])
    return ";".join(str(a) if a == b else f"{a}-{b}" for a, b in runs)


def check_heads(heads: Sequence[int] | None, count: int) -> None:
    """Raise :class:`PerturbationError` unless every query head index is below ``count``."""
    if heads and max(heads) >= count:
        raise PerturbationError(
            f"heads={format_layers(heads)}: the model has {count} query heads (0-{count - 1})"
        )


def check_on_model(p: Any, model: Any, backend: str, layers: int) -> None:
    """Refuse a set model-side perturbation ``p`` (a
    :class:`~..perturbation.ModelPerturbation`) that ``model`` cannot take: a model
    that is not causal, position or feature schemes (or a length scheme) without RoPE
    (``NoRotaryEmbeddingError``; ``logits=`` alone needs none), ``layers=``/``heads=``
    past the model's own (``layers`` decoder layers); a non-rotary position family's
    refusals (:func:`posgen.harness.position_family.check_schemes`)."""

    if backend != "causal":
        raise PerturbationError("positions=/features=/logits= need a causal (decoder-only) model")
    what = " and ".join(
        f"{k}={getattr(v, 'to_string', v.__str__)()}"
        for k, v in (("positions", p.positions), ("features", p.features))
        if v is not None
    )
    family = check_schemes(model, p, what)
    rotary = family.kind == "rotary"
    if p.logits is not None and family.bias_form == "falcon":
        _refuse_falcon_eager(model, p.logits)
    if rotary and (what or p.length is not None):
        require_rotary(model, what)
    check_layers(p.layers, layers)
    check_heads(p.heads, model.config.get_text_config().num_attention_heads)


def _refuse_falcon_eager(model: Any, logits: LogitForm) -> None:
    """``logits=`` on a Falcon-ALiBi reads its logits at its sdpa call: refused, before any
    request, for a model loaded with another attention."""
    try:
        refuse_eager(model)
    except ValueError as error:
        raise PerturbationError(f"logits={logits.name}: {error}") from None
