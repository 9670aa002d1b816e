"""Capture every head's pre-softmax attention logits from the model's own forward.

``capture_attention(model, consumer)`` switches the model to an attention function
registered with ``transformers.AttentionInterface`` under the name ``posgen_capture``,
with transformers' sdpa mask function under the same name (``AttentionMaskInterface``;
without one the function would receive ``mask=None`` for every mask and attention would
silently be non-causal). The sdpa mask function builds no mask where sdpa's causal kernel
does the masking (an unpadded causal forward): such a layer reaches the capture as
``LayerCapture.causal``, and no n × n mask exists anywhere. Padding, sliding windows and
custom patterns arrive as the model's own [B, 1, n, n] bool mask.

The function receives the model's own post-RoPE query, key and value and hands one
``LayerCapture`` per layer to ``consumer``; the capture computes, on demand,

    logits = query @ repeat_kv(key)ᵀ · scaling      [batch, head, query_pos, key_pos] float32

(followed by the model's own soft-capping, tanh(x / cap) · cap, where the layer uses it),
either whole (``LayerCapture.logits``) or a block of query rows and heads at a time
(``LayerCapture.logit_block``: extra memory O(heads × block × n), never n × n for all
heads). ``LayerCapture.attended`` (where the layer may attend) is built only when a
consumer asks for it.

The layer's output, unless the consumer returns one of its own (below), is the model's
own attention:

- when the layer has no soft-capping and no attention sinks and the model does not run
  eager attention: transformers' ``sdpa_attention_forward`` with the arguments and the
  mask the model passed, so a captured sdpa forward (transformers' default) is
  bit-identical to the plain one (causal layers run torch's fused causal kernel: no
  [H, n, n] weights); a model loaded with flash or flex attention gets the same attention
  to float rounding;
- otherwise (a model loaded with ``eager``, soft-capping, sinks): the model family's own
  eager attention, on blocks of query rows when its [B, H, n, n] float32 weights would
  exceed ``ATTENTION_BLOCK_BYTES`` (attention is row-wise: each output row depends only on
  its own query row and mask row), with the mask of each block made additive exactly as
  transformers' eager mask function makes it (0 where attended, the dtype's minimum
  elsewhere).

A consumer that returns a tensor replaces the layer's attention output with it: [B, n, H,
d_v], as an attention function returns it (before the output projection); then the
model's own attention does not run for that layer. ``LayerCapture.value`` gives the value
states for that. Streamed: one layer at a time, the full L×H×n×n tensor is never held.
The original attention implementation is restored on exit, whatever happens.

Inside a Λ block (:func:`posgen.harness.model_side.attention.lambda_attention.lambda_attention`, e.g.
``posgen length``'s forward for ``lambda:G,W``) with n > W, the outputs come from Λ's own
attention (:func:`~posgen.harness.model_side.attention.lambda_attention.lambda_output`), so the
forward is exactly the Λ forward, and ``LayerCapture.attended`` is Λ's local band
0 ≤ i − j < W (``LayerCapture.window`` = W): the keys Λ scores at their true distance,
with the logits q·k of the model's own post-RoPE q and k as above. The G global keys
beyond the window, which Λ scores at the fixed distance W with a re-rotated query, are
not in ``attended``: their logits are not the q·k this capture computes. With n ≤ W, Λ
is plain causal attention and the capture runs as without it. InfLLM
(:mod:`posgen.harness.model_side.attention.infllm`) is captured the same way, W = n_local:
its memory keys, scored at one fixed distance, are left out of ``attended``.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from posgen.compat import base_implementation, internal, using_attention
from posgen.harness.model_family import family_of
from posgen.harness.model_side import door
from posgen.harness.model_side.attention.length import (
    active_band,
    active_band_label,
    length_output,
)
from posgen.harness.model_side.logits.layer_mask import LayerMask
from posgen.harness.position_family import position_family_of

ALL_ATTENTION_FUNCTIONS = internal("transformers.modeling_utils:ALL_ATTENTION_FUNCTIONS")
CAPTURE_NAME = "posgen_capture"
ATTENTION_BLOCK_BYTES = 256 * 2**20  # eager attention in query-row blocks above this

_ACTIVE: dict[int, _CaptureState] = {}  # id(attention module) -> the capture it feeds


@dataclass
class LayerCapture:
    """One layer's capture; tensors live on the model's device."""

    layer: int
    query: torch.Tensor  # [B, H, n, head_dim] post-RoPE, as the model computed it
    key: torch.Tensor  # [B, H, n, head_dim] post-RoPE, grouped KV heads expanded
    value: torch.Tensor  # [B, kv_heads, n, d_v] as the model computed it (not expanded)
    module: torch.nn.Module = field(repr=False)
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = field(repr=False)
    mask: LayerMask = field(repr=False)
    scaling: float = 1.0
    kv_heads: int = 0  # KV heads before expansion: query head h reads KV head h // (H / kv_heads)
    softcap: float | None = None
    window: int | None = None  # under Λ (n > W): W, and ``attended`` is the band i − j < W
    band_label: str = "lambda-band"  # fit_mask's name of that band (infllm-local under InfLLM)
    _logits: torch.Tensor | None = field(default=None, repr=False)

    @property
    def causal(self) -> bool:
        """Whether the layer attends exactly j ≤ i with no padding (under Λ: the band
        0 ≤ i − j < ``window``), known from the model's own mask without building it."""
        return self.mask.mask is None and self.mask.causal

    @property
    def attended(self) -> torch.Tensor:
        """[B, 1, n, n] bool, True where the layer may attend (under Λ: the band); built on
        first use and shared by the layers of one forward that got the same mask."""
        return self.mask.attended(self.window)

    @property
    def logits(self) -> torch.Tensor:
        """[B, H, n, n] float32, pre-softmax, pre-mask (computed on first use, then kept)."""
        if self._logits is None:
            self._logits = self.logit_block(0, self.query.shape[-2])
        return self._logits

    def logit_block(
        self, start: int, stop: int, heads: slice = slice(None), width: int | None = None
    ) -> torch.Tensor:
        """Logits of query rows start..stop−1 against keys 0..width−1 (default all):
        [B, h, stop − start, width] float32 = q·kᵀ·scaling (then the layer's soft-capping)."""
        width = self.key.shape[-2] if width is None else width
        q = self.query[:, heads, start:stop].float()
        block = torch.matmul(q, self.key[:, heads, :width].float().transpose(2, 3)) * self.scaling
        if self.softcap is not None:
            block = torch.tanh(block / self.softcap) * self.softcap
        return block

    def expanded_value(self) -> torch.Tensor:
        """[B, H, n, d_v]: ``value`` with its KV heads expanded to the query heads by the
        model's own ``repeat_kv`` (as ``key`` is)."""
        return family_of(self.module).expand_kv(self.module, self.value, self.query.shape[1])

    def unrotate(self, x: torch.Tensor) -> torch.Tensor:
        """Undo RoPE on ``x`` [B, H, n, head_dim] with the model's own rotation and (cos, −sin).

        RoPE rotates each 2-D subspace by an angle; the model's ``apply_rotary_pos_emb``
        with the sine negated rotates it back. Raises for a model without RoPE; the
        identity for a learned-absolute one or one without positions (its q·k carries no
        rotation, :mod:`posgen.harness.position_family`).
        """
        if self._unrotated():
            return x
        apply_rope = self._rope_function()
        cos, sin = self.position_embeddings
        return apply_rope(x, x, cos, -sin)[0]

    def rotate(self, x: torch.Tensor) -> torch.Tensor:
        """Apply the model's own RoPE to ``x`` [B, H, n, head_dim] at this capture's positions
        (the identity for a learned-absolute model, as :meth:`unrotate`)."""
        if self._unrotated():
            return x
        apply_rope = self._rope_function()
        cos, sin = self.position_embeddings
        return apply_rope(x, x, cos, sin)[0]

    def _unrotated(self) -> bool:
        """A learned-absolute model's layer, or one of a model without positions: no
        rotation in its q·k at all."""

        return position_family_of(self.module).kind in ("absolute", "none")

    def _rope_function(self) -> Callable:
        if self.position_embeddings is None:
            raise ValueError(
                f"{type(self.module).__name__} received no rotary position embeddings: this "
                "measure needs a RoPE model (Llama, Qwen, Mistral, Gemma, Phi-3, GPT-NeoX)"
            )
        return family_of(self.module).apply_rotary_function(self.module)


Consumer = Callable[[LayerCapture], "torch.Tensor | None"]


@dataclass
class _CaptureState:
    consumer: Consumer
    layer_of: dict[int, int]  # id(module) -> layer index
    implementation: str  # the model's own attention implementation (``sdpa``, ``eager``, ...)
    position_embeddings: dict[int, tuple | None] = field(default_factory=dict)
    _last: LayerMask | None = None

    def layer_mask(self, attention_mask, query, key, module, kwargs) -> LayerMask:
        """The ``LayerMask`` of this call: the previous layer's when the model passed the
        same mask object for the same shapes (most models build one per forward)."""
        b, queries, keys = query.shape[0], query.shape[2], key.shape[2]
        causal = kwargs.get("is_causal")
        causal = bool(getattr(module, "is_causal", True) if causal is None else causal)
        last = self._last
        if (
            last is not None
            and last.mask is attention_mask
            and (last.batch, last.queries, last.keys, last.causal) == (b, queries, keys, causal)
        ):
            return last
        self._last = LayerMask(attention_mask, b, queries, keys, causal, query.device)
        return self._last


def capture_attention_forward(module, query, key, value, attention_mask, *args, **kwargs):
    """The registered attention function: capture the logits, then the model's attention."""
    state = _ACTIVE.get(id(module))
    if state is None:
        raise RuntimeError(
            f"attention implementation {CAPTURE_NAME!r} is only valid inside "
            "posgen.harness.model_side.logits.capture.capture_attention()"
        )
    if attention_mask is None and query.shape[2] != key.shape[2]:
        raise RuntimeError(f"{CAPTURE_NAME}: capture full forwards only (use_cache=False)")
    mask = state.layer_mask(attention_mask, query, key, module, kwargs)
    scaling = kwargs.get("scaling")
    scaling = module.head_dim**-0.5 if scaling is None else scaling
    family = family_of(module)
    window = active_band(query.shape[2])  # Λ / InfLLM: its band for the fit, its outputs
    if window is not None and not mask.sees_every_key():
        raise RuntimeError(
            "lambda attention runs unpadded causal forwards; the captured forward has padding"
        )
    # Λ's output first: a layer Λ refuses (soft-capping, sliding window) fails before the fit
    output = None if window is None else length_output(module, query, key, value, **kwargs)
    with torch.no_grad():
        replaced = state.consumer(
            LayerCapture(
                layer=state.layer_of[id(module)],
                query=query,
                key=family.expand_kv(module, key, query.shape[1]),
                value=value,
                module=module,
                position_embeddings=state.position_embeddings.get(id(module)),
                mask=mask,
                scaling=scaling,
                kv_heads=key.shape[1],
                softcap=kwargs.get("softcap"),
                window=window,
                band_label=active_band_label(),
            )
        )
    if replaced is not None:
        return _checked_replacement(replaced, query, value), None
    if output is not None:
        return output, None
    return _model_attention(state, module, query, key, value, mask, args, kwargs)


def _checked_replacement(output, query: torch.Tensor, value: torch.Tensor) -> torch.Tensor:
    """A consumer's output, if it has the attention function's shape [B, n, H, d_v]."""
    b, h, n = query.shape[:3]
    expected = (b, n, h, value.shape[-1])
    if not isinstance(output, torch.Tensor) or tuple(output.shape) != expected:
        got = tuple(output.shape) if isinstance(output, torch.Tensor) else type(output).__name__
        raise ValueError(
            f"{CAPTURE_NAME}: a consumer returns None or the layer's attention output "
            f"[B, n, H, d_v] = {expected}; got {got}"
        )
    return output.to(query.dtype)


def _model_attention(state, module, query, key, value, mask: LayerMask, args, kwargs):
    """The model's own attention output (module doc): sdpa where the model runs it and the
    layer allows it, else the family's eager attention in query-row blocks."""
    eager_only = kwargs.get("softcap") is not None or getattr(module, "sinks", None) is not None
    if state.implementation != "eager" and not eager_only:
        return ALL_ATTENTION_FUNCTIONS["sdpa"](
            module, query, key, value, mask.mask, *args, **kwargs
        )
    eager = family_of(module).eager_attention_function(module)
    return _eager_in_row_blocks(eager, module, query, key, value, mask, args, kwargs)


def _eager_in_row_blocks(eager, module, query, key, value, mask: LayerMask, args, kwargs):
    """The eager attention, whole or on blocks of query rows when its [B, H, n, keys] float32
    weights would exceed ``ATTENTION_BLOCK_BYTES``. Output rows concatenated ([B, n, H, d]);
    the weights are then not returned (None): no caller of a capture asks for them."""
    b, h, n = query.shape[:3]
    keys = key.shape[-2]
    rows = max(1, ATTENTION_BLOCK_BYTES // (4 * b * h * keys))
    if rows >= n:
        additive = mask.additive(0, n, query.dtype)
        return eager(module, query, key, value, additive, *args, **kwargs)
    outputs = [
        eager(
            module,
            query[:, :, start : start + rows],
            key,
            value,
            mask.additive(start, min(start + rows, n), query.dtype),
            *args,
            **kwargs,
        )[0]
        for start in range(0, n, rows)
    ]
    return torch.cat(outputs, dim=1), None


def attention_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's self-attention modules in layer order (see :mod:`posgen.harness.model_family`)."""
    return family_of(model).attention_modules(model)


@contextmanager
def capture_attention(model: torch.nn.Module, consumer: Consumer) -> Iterator[None]:
    """Within the block, every forward of ``model`` calls ``consumer`` once per layer.

    The consumer runs inside the forward (under ``torch.no_grad``) and must not keep the
    tensors it gets longer than it needs them; it returns None (the model's own attention
    output) or the layer's output (module doc). Use ``use_cache=False`` forwards.
    """
    modules = attention_modules(model)
    state = _CaptureState(
        consumer, {id(m): k for k, m in enumerate(modules)}, base_implementation(model)
    )
    if any(id(m) in _ACTIVE for m in modules):
        raise RuntimeError("this model is already being captured (nested capture_attention)")

    def keep_position_embeddings(module, args, kwargs):
        state.position_embeddings[id(module)] = kwargs.get("position_embeddings")

    hooks = [
        m.register_forward_pre_hook(keep_position_embeddings, with_kwargs=True) for m in modules
    ]
    _ACTIVE.update({id(m): state for m in modules})
    try:
        with using_attention(model, CAPTURE_NAME, lambda: capture_attention_forward, mask="sdpa"):
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

    The decoder runs without the LM head (``model.base_model``): the capture needs the
    attention layers only, and [n, vocabulary] logits would be the largest tensor of the
    forward (3 GiB at 16384 tokens of a 49k vocabulary). An explicit all-ones attention
    mask keeps the causal mask in token order even when ``position_ids`` ([n], optional)
    are not 0..n-1 (transformers would otherwise read a step other than +1 as the start of
    a packed sequence); with it, the sdpa mask function still builds no mask. The forward
    runs inside the door (:func:`.door.forward`; plain, or under the perturbation of an
    enclosing door).
    """
    dev = next(model.parameters()).device
    kwargs = {} if position_ids is None else {"position_ids": position_ids[None].to(dev)}
    with torch.no_grad(), door.forward(model), capture_attention(model, consumer):
        model.base_model(
            input_ids=torch.tensor([ids], device=dev),
            use_cache=False,
            attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=dev),
            **kwargs,
        )
