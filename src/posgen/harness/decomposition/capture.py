"""Capture every head's pre-softmax attention logits from the model's own forward.

``capture_attention(model, consumer)`` switches the model to an attention function
registered with ``transformers.AttentionInterface`` under the name ``posgen_capture``
(and the eager mask function under the same name with ``AttentionMaskInterface``; without
it the function would receive ``mask=None`` and attention would silently be non-causal).
The function receives the model's own post-RoPE query and key and hands one
``LayerCapture`` per layer to ``consumer``; the capture computes, on demand,

    logits = query @ repeat_kv(key)ᵀ · scaling      [batch, head, query_pos, key_pos] float32

(followed by the model's own soft-capping, tanh(x / cap) · cap, where the layer uses it),
either whole (``LayerCapture.logits``) or a block of query rows and heads at a time
(``LayerCapture.logit_block``: extra memory O(heads × block × n), never n × n for all
heads). It then calls the model family's own eager attention, so the forward's outputs are
unchanged; when the [B, H, n, n] attention weights would exceed ``ATTENTION_BLOCK_BYTES``,
the eager function is called on blocks of query rows (attention is row-wise: each output
row depends only on its own query row and mask row) and the rows are concatenated.
Streamed: one layer at a time, the full L×H×n×n tensor is never held. The original
attention implementation is restored on exit, whatever happens.

Inside a Λ block (:func:`posgen.harness.hf_posgen.lambda_attention.lambda_attention`, e.g.
``posgen length``'s forward for ``lambda:G,W``) with n > W, the outputs come from Λ's own
attention (:func:`~posgen.harness.hf_posgen.lambda_attention.lambda_output`), so the
forward is exactly the Λ forward, and ``LayerCapture.attended`` is Λ's local band
0 ≤ i − j < W (``LayerCapture.window`` = W): the keys Λ scores at their true distance,
with the logits q·k of the model's own post-RoPE q and k as above. The G global keys
beyond the window, which Λ scores at the fixed distance W with a re-rotated query, are
not in ``attended``: their logits are not the q·k this capture computes. With n ≤ W, Λ
is plain causal attention and the capture runs as without it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from posgen.compat import using_attention
from posgen.harness.hf_posgen.lambda_attention import active_scheme, lambda_output
from posgen.harness.model_family import family_of

CAPTURE_NAME = "posgen_capture"
ATTENTION_BLOCK_BYTES = 256 * 2**20  # eager attention in query-row blocks above this

_ACTIVE: dict[int, _CaptureState] = {}  # id(attention module) -> the capture it feeds


@dataclass
class LayerCapture:
    """One layer's capture; tensors live on the model's device."""

    layer: int
    attended: torch.Tensor  # [B, 1, n, n] bool, True where the layer may attend (Λ: the band)
    query: torch.Tensor  # [B, H, n, head_dim] post-RoPE, as the model computed it
    key: torch.Tensor  # [B, H, n, head_dim] post-RoPE, grouped KV heads expanded
    module: torch.nn.Module = field(repr=False)
    position_embeddings: tuple[torch.Tensor, torch.Tensor] | None = field(repr=False)
    scaling: float = 1.0
    kv_heads: int = 0  # KV heads before expansion: query head h reads KV head h // (H / kv_heads)
    softcap: float | None = None
    window: int | None = None  # under Λ (n > W): W, and ``attended`` is the band i − j < W
    _logits: torch.Tensor | None = field(default=None, repr=False)

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
    _last: tuple | None = None  # (mask, key length, window, attended) of the last layer

    def attended(
        self, attention_mask: torch.Tensor, keys: int, window: int | None = None
    ) -> torch.Tensor:
        """Where the layer may attend, [B, 1, n, keys] bool; with ``window`` only the band
        0 ≤ i − j < window of it (Λ's local branch). Layers that get the same mask object
        (most models build one per forward) share one ``attended`` tensor, so that
        consumers can reuse what they derive from it (identity check)."""
        last = self._last
        if last is not None and last[0] is attention_mask and last[1:3] == (keys, window):
            return last[3]
        mask = attention_mask[:, :, :, :keys]
        attended = mask if mask.dtype == torch.bool else mask == 0
        if window is not None:  # i − j < window, i.e. j − i ≥ 1 − window (bool, no index maps)
            band = torch.ones(mask.shape[-2], keys, dtype=torch.bool, device=mask.device)
            attended = attended & band.triu_(1 - window)
        self._last = (attention_mask, keys, window, attended)  # holds the mask: id stays unique
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
    scheme = active_scheme()  # a Λ forward: its band for the fit, its outputs (module doc)
    window = scheme.window if scheme is not None and query.shape[2] > scheme.window else None
    if window is not None and not _sees_every_key(attention_mask, key.shape[-2]):
        raise RuntimeError(
            "lambda attention runs unpadded causal forwards; the captured forward has padding"
        )
    # Λ's output first: a layer Λ refuses (soft-capping, sliding window) fails before the fit
    output = None if window is None else lambda_output(module, query, key, value, **kwargs)
    key_full = family.expand_kv(module, key, query.shape[1])
    with torch.no_grad():
        state.consumer(
            LayerCapture(
                layer=state.layer_of[id(module)],
                attended=state.attended(attention_mask, key_full.shape[-2], window),
                query=query,
                key=key_full,
                module=module,
                position_embeddings=state.position_embeddings.get(id(module)),
                scaling=scaling,
                kv_heads=key.shape[1],
                softcap=kwargs.get("softcap"),
                window=window,
            )
        )
    if output is not None:
        return output, None
    eager = family.eager_attention_function(module)
    return _eager_in_row_blocks(eager, module, query, key, value, attention_mask, args, kwargs)


def _sees_every_key(attention_mask: torch.Tensor, keys: int) -> bool:
    """Whether the last query row may attend every key (no padding in a causal mask)."""
    last = attention_mask[:, :, -1, :keys]
    return bool(last.all() if last.dtype == torch.bool else (last == 0).all())


def _eager_in_row_blocks(eager, module, query, key, value, attention_mask, args, kwargs):
    """The eager attention, whole or on blocks of query rows when its [B, H, n, keys] float32
    weights would exceed ``ATTENTION_BLOCK_BYTES``. Output rows concatenated ([B, n, H, d]);
    the weights are then not returned (None): no caller of a capture asks for them."""
    b, h, n = query.shape[:3]
    keys = key.shape[-2]
    rows = max(1, ATTENTION_BLOCK_BYTES // (4 * b * h * keys))
    if rows >= n:
        return eager(module, query, key, value, attention_mask, *args, **kwargs)
    outputs = [
        eager(
            module,
            query[:, :, start : start + rows],
            key,
            value,
            attention_mask[:, :, start : start + rows],
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
