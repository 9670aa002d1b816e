"""What a model's family cannot take, refused in one line before anything runs: the
length schemes past a learned table or on a model that runs past its trained context as
it is (:func:`length_refusal`, the words ``posgen length`` and ``hf-posgen length=``
share), and the position, feature and ``logits=`` settings a non-rotary family cannot
take (:func:`check_schemes`). Rotary models are checked where their rotary code is
looked up (:func:`.family.require_rotary`). The entries themselves: :mod:`.family`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from posgen.harness.model_side.family import ModelFamily, family_of
from posgen.perturbations.base import PerturbationError

if TYPE_CHECKING:
    import torch


def _arch(model: torch.nn.Module) -> str:
    return str(getattr(getattr(model, "config", None), "model_type", type(model).__name__))


def length_refusal(family: ModelFamily, schemes: Iterable[str]) -> str:
    """Why the length schemes ``schemes`` (their strings) do not run on a model of
    ``family`` ('' where they do), worded to follow the model's name: a learned absolute
    table has no row past the trained context C, so no scheme runs past it; ALiBi and a
    model without positions run past C as they are, so only the scheme ``none`` applies.
    ``posgen length`` and ``hf-posgen length=`` refuse with these same words."""
    if family.kind == "absolute":
        return (
            "has learned absolute positions: its table has a row per position up to its "
            "trained context C and none past it, so it cannot run past C"
        )
    if family.kind in ("alibi", "none") and any(s.strip() not in ("", "none") for s in schemes):
        signal = {"alibi": "ALiBi positions", "none": "no position encoding"}[family.kind]
        return f"has {signal} and runs past C as it is; only the scheme none applies"
    return ""


def check_schemes(model: torch.nn.Module, p: Any, what: str) -> ModelFamily:
    """Refuse, in one line, what ``p`` (a ``ModelPerturbation``) asks that ``model``'s
    position family cannot take (``what``: its position and feature specs, '' if none;
    a length scheme: :func:`length_refusal`). Rotary models are checked by
    :func:`.family.require_rotary`. Returns the family."""
    family = family_of(model)
    if family.kind == "rotary" or not (what or p.length is not None or p.logits is not None):
        return family
    arch = _arch(model)
    _refuse_length(family, p.length, arch)
    if not (what or p.logits is not None):
        return family  # length=none on a model that runs past C as it is
    if family.kind == "none":
        raise PerturbationError(
            f"{what or 'this scheme'}: this {arch!r} model has no position encoding (no "
            "layer applies one; the causal mask is its only order signal), so there are no "
            "positions to perturb; text perturbations (tasks) still work"
        )
    if family.refusal:
        raise PerturbationError(f"{what or 'this scheme'}: {family.refusal}")
    for refused, why in _refusals(family, p):
        if refused:
            raise PerturbationError(why.format(arch=arch, family=family.kind))
    return family


def _refuse_length(family: ModelFamily, length: Any, arch: str) -> None:
    """Refuse ``length=`` (a ``LengthPerturbation`` or None) where :func:`length_refusal`
    says it does not run."""
    why = "" if length is None else length_refusal(family, [length.to_string()])
    if why:
        todo = "drop length=" if family.kind == "absolute" else "give length=none or drop it"
        raise PerturbationError(f"length={length.to_string()}: this {arch!r} model {why}; {todo}")


def _refusals(family: ModelFamily, p: Any) -> list[tuple[bool, str]]:
    """(refused?, why) of each thing a non-rotary family may not take. ``logits=`` runs on
    learned absolute positions (through the attention functions), on BLOOM and MPT (where
    their own attention adds the bias, :mod:`posgen.harness.model_side.alibi.logits`)
    and on Falcon-ALiBi (through its sdpa mask, :mod:`posgen.harness.model_side.alibi.falcon_sdpa`);
    a family registered with a ``logits_refusal`` takes positions, features, ``layers=`` and
    ``heads=`` but not ``logits=``."""
    qk = p.features is not None and getattr(p.features, "where", "") == "qk"
    absolute = family.kind == "absolute"
    moved = p.positions is not None or p.features is not None
    features = p.features.to_string() if qk else ""
    logits = p.logits.to_string() if p.logits is not None else ""
    return [
        (bool(logits and family.logits_refused), f"logits={logits}: {family.logits_refused}"),
        (
            absolute and moved and p.layers is not None,
            "layers=: this {arch!r} model's learned absolute positions enter once, before "
            "the first layer; drop layers= (positions= acts there)",
        ),
        (
            qk,
            f"{features}: qk noise perturbs rotary queries and keys; this {{arch!r}} model "
            "has {family} positions: use features=rope_noise:σ (a jitter of the positions "
            "it sees)",
        ),
    ]
