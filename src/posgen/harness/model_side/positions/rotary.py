"""Where position perturbations enter a Hugging Face model: inside its rotary embedding.

Passing custom ``position_ids`` to the model's forward is a trap in transformers 5.x: with
``attention_mask=None`` any step other than +1 is read as the start of a new packed
sequence and the causal mask is rebuilt from it. posgen instead leaves the model's inputs
and masks alone and changes only what the rotary embedding module sees: a forward
pre-hook replaces its ``position_ids`` argument by the perturbed positions (planned by
:mod:`.plan`). For identity positions the module computes exactly the same (cos, sin), so
logits are bit-identical.

Only the rotary angles move: masks are built from token order, so Gemma2/Gemma3
sliding-window layers still attend to the ``sliding_window`` most recent tokens in input
order whatever positions they are given (the tokens themselves never move).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from posgen.harness.model_family import require_rotary, rotary_modules

#: ``source(module, given) -> positions``: the position values a rotary module computes its
#: (cos, sin) from in one call, given the ``position_ids`` the model passed it. A fixed
#: ``[B, T]`` tensor is the source of one full forward (:func:`position_source`); a
#: generation plan gives each decode step its own columns (:mod:`posgen.harness.hf_posgen.generation`).
PositionSource = Callable[[torch.nn.Module, torch.Tensor], torch.Tensor]


def position_source(positions: torch.Tensor | PositionSource) -> PositionSource:
    """``positions`` as a :data:`PositionSource`: a tensor ``[B, T]`` is checked against
    every call's ``position_ids`` (:func:`check_position_shape`) and copied once per
    device; a source is returned as it is."""
    if not isinstance(positions, torch.Tensor):
        return positions
    cache: dict[torch.device, torch.Tensor] = {}

    def source(module: torch.nn.Module, given: torch.Tensor) -> torch.Tensor:
        check_position_shape(module, given, positions)
        new = cache.get(given.device)
        if new is None:
            new = cache[given.device] = positions.to(given.device)
        return new

    return source


@contextmanager
def rotary_positions(
    model: torch.nn.Module, positions: torch.Tensor | PositionSource
) -> Iterator[None]:
    """Within the block, every rotary embedding of ``model`` computes its (cos, sin) from
    ``positions`` ``[B, T]`` (or what a :data:`PositionSource` gives for the call) instead
    of the ``position_ids`` the model passes (``[1, T]`` or ``[B, T]``, consecutive). The
    hooks are always removed on exit."""
    modules = rotary_modules(model)
    if not modules:
        require_rotary(model, "a position perturbation")
    source = position_source(positions)

    def pre_hook(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        in_kwargs = "position_ids" in kwargs
        new = source(module, kwargs["position_ids"] if in_kwargs else args[1])
        if in_kwargs:
            return args, {**kwargs, "position_ids": new}
        return (args[0], new, *args[2:]), kwargs

    handles = [m.register_forward_pre_hook(pre_hook, with_kwargs=True) for m in modules]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def check_position_shape(
    module: torch.nn.Module, given: torch.Tensor, positions: torch.Tensor
) -> None:
    """Refuse a rotary call whose ``position_ids`` do not fit the planned ``positions``."""
    if (
        given.dim() != 2
        or given.shape[-1] != positions.shape[-1]
        or given.shape[0] not in (1, positions.shape[0])
    ):
        raise RuntimeError(
            f"{type(module).__name__} got position_ids of shape {tuple(given.shape)}, but "
            f"posgen planned positions for a batch of shape {tuple(positions.shape)}; "
            "a batch plan covers one full forward (generation with a KV cache plans each "
            "step through hf-posgen's generate_until)"
        )
