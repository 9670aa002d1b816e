"""Putting a length scheme (and optionally a position scheme) on a model.

- rope scalings (``dynamic``, ``yarn``) are load-time: :func:`posgen.harness.loading.load_model`
  passes the scheme's ``rope_parameters`` to ``from_pretrained`` (editing a built model's
  config does nothing: the rotary module reads it in ``__init__``);
- ``scale:F`` and position schemes enter inside the rotary embedding
  (:func:`posgen.harness.model_side.positions.rotary.rotary_positions`), combined as ``positions / F``;
  on an ALiBi model (scheme ``none`` only) a position scheme enters the bias every block
  is handed (:func:`posgen.harness.model_side.positions.non_rotary.family_positions`), by the
  model's position family, not by whether it has a rotary module (Falcon-ALiBi keeps one
  its layers never apply);
- ``lambda:G,W`` and ``infllm`` swap the attention function
  (:mod:`posgen.harness.model_side.attention.length`).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch

from posgen.harness.model_side.attention.length import length_attention
from posgen.harness.model_side.positions.non_rotary import family_positions
from posgen.harness.model_side.positions.plan import build_plan
from posgen.harness.model_side.positions.rotary import rotary_positions
from posgen.harness.position_family import position_family_of
from posgen.perturbations.length import LengthPerturbation, combined_positions
from posgen.perturbations.positions import PositionPerturbation


def check_loaded(model: Any, length: LengthPerturbation) -> None:
    """Refuse a model that was not loaded with the rope scaling the scheme needs."""
    have = dict(getattr(model.config, "rope_parameters", None) or {})
    if length.rope_type is None:
        if have.get("rope_type", "default") in ("dynamic", "yarn"):
            raise RuntimeError(
                f"length={length.to_string()} runs the model as trained, but it was loaded "
                f"with rope scaling {have}"
            )
        return
    factor = float(getattr(length, "factor", 0.0))
    if have.get("rope_type") != length.rope_type or have.get("factor") != factor:
        raise RuntimeError(
            f"length={length.to_string()} is applied at load time, but this model was loaded "
            f"with rope_parameters={have}; load it with posgen.harness.loading.load_model(entry, length=scheme)"
        )


@contextmanager
def length_forward(
    model: Any,
    input_ids: torch.Tensor,
    length: LengthPerturbation,
    positions: PositionPerturbation | None = None,
    seed: int = 1234,
    block_size: int | None = None,
) -> Iterator[None]:
    """Within the block, a forward of ``input_ids`` ``[1, n]`` (one unpadded document)
    runs under ``length`` and ``positions``. Rope-scaling schemes must already be loaded
    (checked)."""
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise ValueError(f"one document at a time: input_ids [1, n], got {tuple(input_ids.shape)}")
    check_loaded(model, length)
    scheme = combined_positions(positions, length)
    with ExitStack() as stack:
        if scheme is not None and not scheme.is_identity:
            plan = build_plan(input_ids, [int(input_ids.shape[1])], (scheme,), seed)
            assert plan.positions is not None
            stack.enter_context(_planned_positions(model, plan.positions))
        if length is not None and length.uses_attention:
            stack.enter_context(length_attention(model, length, block_size))
        yield


def _planned_positions(model: Any, positions: torch.Tensor) -> Any:
    """The context that hands ``model`` the planned ``positions`` ``[1, n]`` where its
    positions enter: the rotary embedding, or (ALiBi) the bias of every block."""
    if position_family_of(model).kind == "rotary":
        return rotary_positions(model, positions)
    return family_positions(model, positions)
