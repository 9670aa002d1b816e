"""What the attention functions that re-rotate queries and keys (Λ, InfLLM) share: a hook
that keeps the rotary module's latest inputs and ``(cos, sin)``, and the model's own
attention for the forwards where they are plain causal attention."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from posgen.compat import internal
from posgen.harness.model_family import family_of

ALL_ATTENTION_FUNCTIONS = internal("transformers.modeling_utils:ALL_ATTENTION_FUNCTIONS")


def own_attention(module, base: str, query, key, value, attention_mask, **kwargs: Any):
    """The model's own attention implementation ``base`` (for ``eager`` the family's own
    eager attention), called as transformers calls it: where Λ or InfLLM is plain causal."""
    own_eager = family_of(module).eager_attention_function(module)
    plain = ALL_ATTENTION_FUNCTIONS.get_interface(base, own_eager)
    return plain(module, query, key, value, attention_mask, **kwargs)


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
