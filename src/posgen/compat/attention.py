"""posgen's own attention functions in a model: registered once with transformers'
``AttentionInterface`` (the mask function beside it with ``AttentionMaskInterface``),
active within a block, the model's own implementation restored on exit."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

from posgen.compat import CompatError, attn_implementation, internal


@contextmanager
def attention_implementation(model: Any, name: str) -> Iterator[str]:
    """Within the block, ``model`` runs the attention implementation ``name`` (one
    registered with ``transformers.AttentionInterface``); its own is restored on exit,
    also after an error. Yields the name of its own. Raises :class:`CompatError` when the
    model does not take a registered implementation."""
    original = attn_implementation(model)
    try:
        if original != name:
            model.set_attn_implementation(name)
        if attn_implementation(model) != name:
            raise CompatError(
                f"{type(model).__name__} does not accept a registered attention "
                f"function (AttentionInterface {name!r})"
            )
        yield original
    finally:
        if attn_implementation(model) != original:
            model.set_attn_implementation(original)


# registered name -> the implementation it wraps ("" for a function that wraps none)
_REGISTERED_ATTENTION: dict[str, str] = {}


def register_attention(
    name: str, make_forward: Callable[[], Callable[..., Any]], mask: str, wraps: str = ""
) -> str:
    """Register ``make_forward()`` with ``transformers.AttentionInterface`` under ``name``
    (once per process), with the mask function of the implementation ``mask`` (``eager``,
    ``sdpa``, ...) under the same name in ``AttentionMaskInterface``: without it the
    function would get ``mask=None`` and attention would silently become non-causal.
    ``wraps``: the implementation the function calls through to, if any
    (:func:`base_implementation` sees through it). Returns ``name``."""
    if name in _REGISTERED_ATTENTION:
        return name
    from transformers import AttentionInterface, AttentionMaskInterface

    masks = internal("transformers.masking_utils:ALL_MASK_ATTENTION_FUNCTIONS")
    if mask not in masks:
        raise CompatError(
            f"{name}: transformers has no mask function for {mask!r}; load the model with "
            "attn_implementation='sdpa' or 'eager'"
        )
    AttentionInterface.register(name, make_forward())
    AttentionMaskInterface.register(name, masks[mask])
    _REGISTERED_ATTENTION[name] = wraps
    return name


def base_implementation(model: Any) -> str:
    """The attention implementation ``model`` runs, seen through posgen's wrappers (a
    model inside a qk-noise block still reports ``sdpa``)."""
    name = attn_implementation(model)
    while _REGISTERED_ATTENTION.get(name):
        name = _REGISTERED_ATTENTION[name]
    return name


@contextmanager
def using_attention(
    model: Any,
    name: str,
    make_forward: Callable[[], Callable[..., Any]],
    mask: str,
    wraps: str = "",
    state: tuple[ContextVar, Any] | None = None,
) -> Iterator[str]:
    """The one way posgen runs an attention function of its own (attention capture, qk
    noise, Λ attention, ``logits=``): registered once (:func:`register_attention`), active
    within the block, the model's own implementation restored on exit
    (:func:`attention_implementation`). ``state`` (a context variable and its value): what
    the function reads on each call, set for the block and reset after it. Yields the name
    of the model's own."""
    register_attention(name, make_forward, mask, wraps)
    token = None if state is None else state[0].set(state[1])
    try:
        with attention_implementation(model, name) as original:
            yield original
    finally:
        if state is not None:
            state[0].reset(token)
