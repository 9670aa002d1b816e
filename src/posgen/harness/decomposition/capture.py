"""Capture every head's pre-softmax attention logits from the model's own forward.

``capture_attention(model, consumer)`` switches the model to an attention function
registered with ``transformers.AttentionInterface`` under the name ``posgen_capture``
(and the eager mask function under the same name with ``AttentionMaskInterface``; without
it the function would receive ``mask=None`` and attention would silently be non-causal).
The function receives the model's own post-RoPE query and key, computes

    logits = query @ repeat_kv(key)ᵀ · scaling      [batch, head, query_pos, key_pos] float32

(followed by the model's own soft-capping, tanh(x / cap) · cap, where the layer uses it),
hands one ``LayerCapture`` per layer to ``consumer`` and then calls the model family's own
eager attention, so the forward's outputs are unchanged. Streamed: one layer's logits at a
time, the full L×H×n×n tensor is never held. The original attention implementation is
restored on exit, whatever happens.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from posgen.compat import using_attention
from posgen.harness.model_family import family_of

CAPTURE_NAME = "posgen_capture"

_ACTIVE: dict[int, _CaptureState] = {}  # id(attention module) -> the capture it feeds


@dataclass
class LayerCapture:
    """One layer's capture; tensors live on the model's device."""

    layer: int
    logits: torch.Tensor  # [B, H, n, n] float32, pre-softmax, pre-mask
    attended: torch.Tensor  # [B, 1, n, n] bool, True where the layer may attend
    query: torch.Tensor  # [B, H, n, head_dim] post-RoPE, as the model computed it
    key: torch.Tensor  # [B, H, n, head_dim] post-RoPE, grouped KV heads expanded
    module: torch.nn.Module = field(repr=False)
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = field(repr=False)
    scaling: float = 1.0
    kv_heads: int = 0  # KV heads before expansion: query head h reads KV head h // (H / kv_heads)

    def unrotate(self, x: torch.Tensor) -> torch.Tensor:
        """Undo RoPE on ``x`` [B, H, n, head_dim] with the model's own rotation and (cos, −sin).

        RoPE rotates each 2-D subspace by an angle; the model's ``apply_rotary_pos_emb``
        with the sine negated rotates it back. Raises for a model without RoPE.
        """
        apply_rope = self._rope_function()
        cos, sin = self.position_embeddings
        return apply_rope(x, x, cos, -sin)[0]

    def rotate(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the model's own RoPE to ``x`` [B, H, n, head_dim] at this capture's positions."""
        apply_rope = self._rope_function()
        cos, sin = self.position_embeddings
        return apply_rope(x, x, cos, sin)[0]

    def _rope_function(self) -> Callable:
        if self.position_embeddings is None:
            raise ValueError(
                f"{type(self.module).__name__} received no rotary position embeddings: this "
                "measure needs a RoPE model (Llama, Qwen, Mistral, Gemma, Phi-3, GPT-NeoX)"
            )
        return family_of(self.module).apply_rotary_function(self.module)


Consumer = Callable[[LayerCapture], None]


@dataclass
class _CaptureState:
    consumer: Consumer
    layer_of: dict[int, int]  # id(module) -> layer index
    position_embeddings: dict[int, tuple | None] = field(default_factory=dict)
    _last: tuple | None = None  # (mask, key length, attended) of the last layer

    def attended(self, attention_mask: torch.Tensor, keys: int) -> torch.Tensor:
        """Where the layer may attend, [B, 1, n, keys] bool. Layers that get the same mask
        object (most models build one per forward) share one ``attended`` tensor, so that
        consumers can reuse what they derive from it (identity check)."""
        last = self._last
        if last is not None and last[0] is attention_mask and last[1] == keys:
            return last[2]
        mask = attention_mask[:, :, :, :keys]
        attended = mask if mask.dtype == torch.bool else mask == 0
        self._last = (attention_mask, keys, attended)  # holds the mask: its id stays unique
        return attended


def capture_attention_forward(module, query, key, value, attention_mask, *args, **kwargs):
    """The registered attention function: capture the logits, then run the eager attention."""
    state = _ACTIVE.get(id(module))
    if state is None:
        raise RuntimeError(
            f"attention implementation {CAPTURE_NAME!r} is only valid inside "
            "posgen.harness.decomposition.capture.capture_attention()"
        )
    if attention_mask is None:
        raise RuntimeError(
            f"{CAPTURE_NAME}: the model passed no attention mask; register the "
            "mask function (capture_attention does) so attention stays causal"
        )
    scaling = kwargs.get("scaling")
    scaling = module.head_dim**-0.5 if scaling is None else scaling
    family = family_of(module)
    key_full = family.expand_kv(module, key, query.shape[1])
    with torch.no_grad():
        logits = torch.matmul(query.float(), key_full.float().transpose(2, 3)) * scaling
        softcap = kwargs.get("softcap")
        if softcap is not None:
            logits = torch.tanh(logits / softcap) * softcap
        attended = state.attended(attention_mask, key_full.shape[-2])
        state.consumer(
            LayerCapture(
                layer=state.layer_of[id(module)],
                logits=logits,
                attended=attended,
                query=query,
                key=key_full,
                module=module,
                position_embeddings=state.position_embeddings.get(id(module)),
                scaling=scaling,
                kv_heads=key.shape[1],
            )
        )
    eager = family.eager_attention_function(module)
    return eager(module, query, key, value, attention_mask, *args, **kwargs)


def attention_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's self-attention modules in layer order (see :mod:`posgen.harness.model_family`)."""
    return family_of(model).attention_modules(model)


@contextmanager
def capture_attention(model: torch.nn.Module, consumer: Consumer) -> Iterator[None]:
    """Within the block, every forward of ``model`` calls ``consumer`` once per layer.

    The consumer runs inside the forward (under ``torch.no_grad``) and must not keep the
    tensors it gets longer than it needs them. Use ``use_cache=False`` forwards.
    """
    modules = attention_modules(model)
    state = _CaptureState(consumer, {id(m): k for k, m in enumerate(modules)})
    if any(id(m) in _ACTIVE for m in modules):
        raise RuntimeError("this model is already being captured (nested capture_attention)")

    def keep_position_embeddings(module, args, kwargs):
        state.position_embeddings[id(module)] = kwargs.get("position_embeddings")

    hooks = [
        m.register_forward_pre_hook(keep_position_embeddings, with_kwargs=True) for m in modules
    ]
    _ACTIVE.update({id(m): state for m in modules})
    try:
        with using_attention(model, CAPTURE_NAME, lambda: capture_attention_forward, mask="eager"):
            yield
    finally:
        for hook in hooks:
            hook.remove()
        for m in modules:
            _ACTIVE.pop(id(m), None)


def capture_forward(
    model: torch.nn.Module,
    ids: list[int],
    consumer: Consumer,
    position_ids: torch.Tensor | None = None,
) -> None:
    """One captured forward of a single sequence ``ids`` (batch 1, no cache).

    An explicit all-ones attention mask keeps the causal mask in token order even when
    ``position_ids`` ([n], optional) are not 0..n-1 (transformers would otherwise read a
    step other than +1 as the start of a packed sequence).
    """
    dev = next(model.parameters()).device
    kwargs = {} if position_ids is None else {"position_ids": position_ids[None].to(dev)}
    with torch.no_grad(), capture_attention(model, consumer):
        model(
            torch.tensor([ids], device=dev),
            use_cache=False,
            attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=dev),
            **kwargs,
        )
