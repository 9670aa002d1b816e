"""The one wrapper behind hf-posgen's attention functions around the model's own.

qk noise (:mod:`.qk_noise`), Λ attention (:mod:`.lambda_attention`), InfLLM attention
(:mod:`.infllm`) and the logit replacement of ``logits=``
(:mod:`..logits.replacement`) each replace a model's attention function while calling
through to the implementation it was loaded with (``sdpa``, ``eager``, ...). What they
share is here, in :class:`WrappedAttention`; each keeps only its own math, a
:data:`LayerCall`:

- **registration**: one function per base implementation, registered with
  transformers' ``AttentionInterface`` as ``<prefix><base>`` (``posgen_qk_noise_sdpa``),
  with a mask function beside it (the base's own, or one named), through
  :func:`posgen.compat.using_attention`;
- **the base function**: the model's own attention for a module
  (:func:`own_attention_function`: the registered ``<base>`` function, or for ``eager``
  the family's own eager attention, where Gemma2's soft-capping lives);
- **install and remove**: :meth:`WrappedAttention.active` checks that the base can be
  wrapped, registers the feature's forward hooks, makes the function the model's
  implementation with the block's state, and on exit (also after an error) removes the
  hooks and restores the model's own implementation and the state: the pattern of
  lm-eval's ``hf_steered``;
- **per-module dispatch**: every call of a layer's attention hands the block's state,
  the model's own attention for that module (:class:`OwnAttention`) and the call's
  arguments to the feature; a call outside a block is an error.

Attention and RoPE are never re-implemented here: the feature gets the post-RoPE
``query [B, H, T, d]``, ``key``/``value [B, Hkv, K, d]`` the model's own forward computed,
and returns what an attention function returns (``[B, T, H, d]`` and weights or None).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

import torch

from posgen.compat import base_implementation, internal, using_attention
from posgen.harness.model_family import family_of

ALL_ATTENTION_FUNCTIONS = internal("transformers.modeling_utils:ALL_ATTENTION_FUNCTIONS")

#: ``call(state, own, module, query, key, value, attention_mask, **kwargs)``: one call of
#: a layer's attention under a feature, ``state`` what the enclosing
#: :meth:`WrappedAttention.active` block was given, ``own`` the model's own attention for
#: ``module`` (:class:`OwnAttention`); returns what an attention function returns.
LayerCall = Callable[..., Any]

#: ``(module, hook)``: a forward hook (``with_kwargs``) a feature needs within its block
ForwardHook = tuple[torch.nn.Module, Callable[..., Any]]


def own_attention_function(base: str, module: torch.nn.Module) -> Callable[..., Any]:
    """The model's own attention function ``base`` for ``module``: the one registered with
    transformers under ``base``, for ``eager`` the family's own eager attention."""
    if base == "eager":
        return family_of(module).eager_attention_function(module)
    return ALL_ATTENTION_FUNCTIONS[base]


def wrappable(base: str, what: str) -> str:
    """``base`` if a wrapper can call through to it (a registered implementation, or
    ``eager``); else a ``ValueError`` naming ``what`` wraps it."""
    if base != "eager" and base not in ALL_ATTENTION_FUNCTIONS:
        raise ValueError(
            f"{what} cannot wrap attention implementation {base!r}: it is not "
            f"registered with transformers ({sorted(ALL_ATTENTION_FUNCTIONS)})"
        )
    return base


@dataclass(frozen=True)
class OwnAttention:
    """The model's own attention implementation ``base`` for one module, called as
    transformers calls an attention function."""

    base: str
    function: Callable[..., Any]

    def __call__(self, module: torch.nn.Module, query, key, value, mask, **kwargs: Any) -> Any:
        return self.function(module, query, key, value, mask, **kwargs)


class WrappedAttention:
    """One of posgen's attention functions around the model's own (module doc).

    ``prefix``: the registered name's start (``posgen_qk_noise_``); ``what``: the feature
    as errors name it (``qk_noise``); ``block``: where a call must come from, as the error
    outside one says it (``posgen's qk_noise context; use HFPosgenLM``); ``call``: the
    feature's :data:`LayerCall`; ``mask``: the implementation whose mask function is
    registered beside it (None: the base's own)."""

    def __init__(
        self, prefix: str, what: str, block: str, call: LayerCall, mask: str | None = None
    ) -> None:
        self.prefix, self.what, self.block, self.call, self.mask = prefix, what, block, call, mask
        self._state: ContextVar[Any] = ContextVar(f"{prefix}state", default=None)

    def name(self, base: str) -> str:
        """The registered name of the function around ``base`` (``sdpa``, ``eager``)."""
        return self.prefix + base

    def current(self) -> Any:
        """The state of the enclosing :meth:`active` block, or None outside one."""
        return self._state.get()

    def make_forward(self, base: str) -> Callable[..., Any]:
        """The attention function registered as :meth:`name` ``(base)``: each call goes to
        the feature's ``call`` with the block's state and the model's own attention."""

        def forward(module, query, key, value, attention_mask, **kwargs: Any) -> Any:
            state = self._state.get()
            if state is None:
                raise RuntimeError(
                    f"attention implementation {self.name(base)!r} was called outside {self.block}"
                )
            own = OwnAttention(base, own_attention_function(base, module))
            return self.call(state, own, module, query, key, value, attention_mask, **kwargs)

        forward.__name__ = f"{self.prefix}{base}_forward"
        return forward

    @contextmanager
    def active(
        self, model: torch.nn.Module, state: Any, hooks: Sequence[ForwardHook] = ()
    ) -> Iterator[str]:
        """Within the block every attention call of ``model`` goes to the feature with
        ``state``, and each of ``hooks`` is registered as a forward hook; on exit, whatever
        happens, the hooks are removed and the model's own implementation and the state
        restored. Raises ``ValueError`` when the model's implementation cannot be wrapped.
        Yields the base implementation."""
        base = wrappable(base_implementation(model), self.what)
        handles = []
        try:
            for module, hook in hooks:
                handles.append(module.register_forward_hook(hook, with_kwargs=True))
            make = lambda: self.make_forward(base)  # noqa: E731
            name, mask = self.name(base), self.mask or base
            with using_attention(model, name, make, mask, base, (self._state, state)):
                yield base
        finally:
            for handle in handles:
                handle.remove()
