"""What the attention functions that re-rotate queries and keys (Λ, InfLLM) share: a hook
that keeps the rotary module's latest inputs and ``(cos, sin)`` (where they are plain
causal attention they call the model's own, :mod:`.wrapper`)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch


def rotary_recorder(state: Any) -> Callable[..., None]:
    """A forward hook (``with_kwargs``) of the rotary module that keeps its latest input
    ``x``, ``position_ids`` and ``(cos, sin)`` on ``state`` and drops what was derived
    from the previous ones (``state.fixed``; Λ's masks)."""

    def hook(module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        state.rotary = module
        state.x = kwargs.get("x", args[0] if args else None)
        state.positions = kwargs["position_ids"] if "position_ids" in kwargs else args[1]
        state.cos, state.sin = output
        state.fixed = None
        if hasattr(state, "masks"):
            state.masks.clear()

    return hook
