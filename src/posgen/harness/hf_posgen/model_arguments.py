"""hf-posgen's own model arguments, checked before any weights load and on the model.

:func:`checked_arguments` parses ``positions=``, ``features=``, ``perturb_seed=``,
``length=``, ``layers=``, ``heads=`` and ``logits=`` and refuses what excludes each
other; :func:`checked_before_load` checks them against the model's config and the
installed libraries (:mod:`.pretrained_config`) and resolves the embedded model's alias
and the length scheme; :func:`checked_on_model` checks a perturbation against the loaded
model whenever it is set (:meth:`.model.HFPosgenLM.set_perturbation`). Each raises
``PerturbationError`` with the argument it refuses.
"""

from __future__ import annotations

import dataclasses
from typing import Any

from posgen.harness.embedded import resolve_pretrained
from posgen.harness.hf_posgen.layer_hooks import layer_count
from posgen.harness.hf_posgen.layer_selection import check_on_model
from posgen.harness.hf_posgen.logit_forms import LogitDonor, check_beside_length, with_donor
from posgen.harness.hf_posgen.model_perturbation import ModelPerturbation, refuse_empty
from posgen.harness.hf_posgen.pretrained_config import (
    check_family_in_config,
    check_layers_in_config,
    parse_length_arg,
    require_compatible,
    resolve_length,
)
from posgen.perturbations.base import PerturbationError
from posgen.perturbations.length import LengthPerturbation


def checked_arguments(
    positions: str | None,
    features: str | None,
    perturb_seed: int | str,
    length: str | None,
    layers: str | None,
    heads: str | None,
    logits: str | None,
) -> tuple[ModelPerturbation, LengthPerturbation | None]:
    """hf-posgen's own model arguments checked and parsed before any weights load: the
    model-side perturbation and the length scheme (or None). Raises ``PerturbationError``
    (an empty value, an unknown or invalid spec, settings that exclude each other)."""
    refuse_empty(
        {
            "positions": positions,
            "features": features,
            "perturb_seed": perturb_seed,
            "length": length,
            "layers": layers,
            "heads": heads,
            "logits": logits,
        }
    )
    perturbation = ModelPerturbation.parse(positions, features, perturb_seed, layers, heads, logits)
    if perturbation.logits is not None and perturbation.logits.needs_donor:
        raise PerturbationError(
            "logits=foreign takes its distance term from another sequence's fit: set "
            "HFPosgenLM.logit_donor and call set_perturbation (posgen cause does)"
        )
    length_scheme = parse_length_arg(length)
    _refuse_layers_beside_length(perturbation.layers, length_scheme)
    check_beside_length(perturbation.logits, length_scheme)
    return perturbation, length_scheme


def checked_before_load(
    pretrained: Any,
    perturbation: ModelPerturbation,
    length_scheme: LengthPerturbation | None,
    kwargs: dict[str, Any],
) -> tuple[Any, LengthPerturbation | None]:
    """``pretrained`` (the embedded model's alias resolved to its folder) and the length
    scheme (``infllm`` completed from the trained context), after checking from the
    config alone, before weights load, that the model takes ``perturbation``'s
    ``layers=``/``heads=`` and schemes, and the installed libraries hold every internal
    posgen uses with it (:func:`posgen.compat.require`). ``kwargs``: ``hf``'s model
    arguments (``trust_remote_code``)."""
    if isinstance(pretrained, str):
        pretrained = resolve_pretrained(pretrained)
        check_layers_in_config(pretrained, perturbation, kwargs)
        with_length = dataclasses.replace(perturbation, length=length_scheme)
        check_family_in_config(pretrained, with_length, kwargs)  # length= included
    length_scheme = resolve_length(pretrained, length_scheme, kwargs)  # infllm: from C
    require_compatible(pretrained, kwargs)  # posgen.compat, before weights load
    return pretrained, length_scheme


def checked_on_model(
    new: ModelPerturbation,
    length: LengthPerturbation | None,
    donor: LogitDonor | None,
    model: Any,
    backend: str,
) -> ModelPerturbation:
    """``new`` with the model's length scheme and ``logits=foreign``'s ``donor``, checked
    against the loaded ``model`` (its layers and heads, what its position family takes;
    ``backend``: HFLM's)."""
    new = dataclasses.replace(new, length=length)
    _refuse_layers_beside_length(new.layers, new.length)
    new = with_donor(new, donor)
    if new.is_set:
        check_on_model(new, model, backend, layer_count(model))
    return new


def _refuse_layers_beside_length(
    layers: tuple[int, ...] | None, length: LengthPerturbation | None
) -> None:
    if layers is not None and length is not None:
        raise PerturbationError("layers= restricts positions=/features=; drop length=")
