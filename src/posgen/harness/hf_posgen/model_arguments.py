"""hf-posgen's own model arguments, checked before any weights load and on the model.

:func:`checked_arguments` parses ``positions=``, ``features=``, ``perturb_seed=``,
``length=``, ``layers=``, ``heads=`` and ``logits=`` and refuses what excludes each
other; :func:`checked_before_load` checks them against the model's config and the
installed libraries (:mod:`.pretrained_config`) and resolves the embedded model's alias
and the length scheme; :func:`checked_on_model` checks a perturbation against the loaded
model whenever it is set (:meth:`.model.HFPosgenLM.set_perturbation`). Each raises
``PerturbationError`` with the argument it refuses. :func:`hold_max_length` holds the
loaded model's ``max_length`` to the positions one forward of it takes.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from posgen.harness.embedded import resolve_pretrained
from posgen.harness.hf_posgen.depth_rows import needs_blocks
from posgen.harness.hf_posgen.pretrained_config import (
    check_family_in_config,
    check_layers_in_config,
    check_max_length,
    parse_length_arg,
    require_compatible,
    resolve_length,
)
from posgen.harness.model_side.family import length_limit
from posgen.harness.model_side.logits.forms import LogitDonor, check_beside_length, with_donor
from posgen.harness.model_side.perturbation import ModelPerturbation, refuse_empty
from posgen.harness.model_side.positions.layers import layer_count
from posgen.harness.model_side.positions.selection import check_on_model
from posgen.perturbations.base import PerturbationError
from posgen.perturbations.length import LengthPerturbation
from posgen.perturbations.length_infllm import FIELDS as INFLLM_FIELDS


def checked_arguments(
    positions: str | None,
    features: str | None,
    perturb_seed: int | str,
    length: str | None,
    layers: str | None,
    heads: str | None,
    logits: str | None,
    others: Mapping[str, Any] | None = None,
) -> tuple[ModelPerturbation, LengthPerturbation | None]:
    """hf-posgen's own model arguments checked and parsed before any weights load: the
    model-side perturbation and the length scheme (or None). ``others``: the model's other
    arguments (``hf``'s), where a length scheme cut at its commas leaves its pieces.
    Raises ``PerturbationError`` (an empty value, an unknown or invalid spec, a length
    scheme cut by lm-eval, settings that exclude each other)."""
    refuse_split_length(length, others or {})
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
    _refuse_depth_beside_scaling(perturbation, length_scheme)
    _refuse_layers_beside_length(perturbation.layers, length_scheme)
    check_beside_length(perturbation.logits, length_scheme)
    return perturbation, length_scheme


def refuse_split_length(length: Any, others: Mapping[str, Any]) -> None:
    """Refuse a length scheme that lm-eval's ``--model_args`` cut at its commas (it splits
    them at every comma): ``length=infllm:topk=2,n_local=64`` arrives as
    ``length=infllm:topk=2`` beside a model argument ``n_local=64`` (which ``hf`` would
    hand to the model's constructor), ``length=lambda:4,8192`` as ``length=lambda:4``
    beside an argument named ``8192`` (and no value). Such a piece is an argument whose
    name is no keyword (``8192``), a ``C`` without a value beside ``lambda``, or one named
    after an InfLLM parameter beside ``infllm``."""
    name = length.partition(":")[0].strip() if isinstance(length, str) else ""
    if name not in ("lambda", "infllm"):
        return
    pieces = [
        key if value == "" else f"{key}={value}"
        for key, value in others.items()
        if not str(key).isidentifier()
        or (name == "lambda" and key == "C" and value == "")
        or (name == "infllm" and key in INFLLM_FIELDS)
    ]
    if pieces:
        typed = ",".join([length, *pieces])
        own = "a model argument of its own" if len(pieces) == 1 else "model arguments of their own"
        raise PerturbationError(
            f"length={typed}: lm-eval splits --model_args at every comma, so "
            f"{', '.join(pieces)} arrived as {own}; inside --model_args separate a length "
            f"scheme's values with ':' (length={typed.replace(',', ':')})"
        )


def checked_before_load(
    pretrained: Any,
    perturbation: ModelPerturbation,
    length_scheme: LengthPerturbation | None,
    kwargs: dict[str, Any],
) -> tuple[Any, LengthPerturbation | None]:
    """``pretrained`` (the embedded model's alias resolved to its folder) and the length
    scheme (``infllm`` completed from the trained context), after checking from the
    config alone, before weights load, that the model takes ``perturbation``'s
    ``layers=``/``heads=`` and schemes and its ``max_length=``, and the installed libraries
    hold every internal posgen uses with it (:func:`posgen.compat.require`). ``kwargs``:
    ``hf``'s model arguments (``trust_remote_code``, ``max_length``)."""
    if isinstance(pretrained, str):
        pretrained = resolve_pretrained(pretrained)
        check_layers_in_config(pretrained, perturbation, kwargs)
        with_length = dataclasses.replace(perturbation, length=length_scheme)
        check_family_in_config(pretrained, with_length, kwargs)  # length= included
    check_max_length(pretrained, kwargs)
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


def hold_max_length(lm: Any) -> None:
    """HFLM reads a model's length from ``n_positions``, ``max_position_embeddings`` or
    ``n_ctx``, else its tokenizer's, else 2048: where the model's positions end sooner
    under another field (MPT's ``max_seq_len``,
    :func:`posgen.harness.model_side.family.length_limit`), its ``max_length`` is held to
    them, so its rolling windows and truncated contexts fit (a ``max_length=`` past them
    was refused before load, :func:`checked_before_load`)."""
    limit = length_limit(lm.model.config)
    if limit is not None and lm.max_length > limit[1]:
        lm._max_length = limit[1]  # HFLM's max_length= (compat.LM_EVAL_ATTRIBUTES)


def _refuse_depth_beside_scaling(p: ModelPerturbation, length: LengthPerturbation | None) -> None:
    """``positions=depth:D`` gives the evidence block the ids of its slot at depth D; a
    length scheme that scales every position (``scale:F``) would move those ids again."""
    if needs_blocks(p.positions) and length is not None and length.position_factor != 1:
        raise PerturbationError(
            f"positions={p.positions.to_string()} beside length={length.to_string()}: the "
            "length scheme scales every position, the evidence's moved ids included; run "
            "them apart"
        )


def _refuse_layers_beside_length(
    layers: tuple[int, ...] | None, length: LengthPerturbation | None
) -> None:
    if layers is not None and length is not None:
        raise PerturbationError("layers= restricts positions=/features=; drop length=")
