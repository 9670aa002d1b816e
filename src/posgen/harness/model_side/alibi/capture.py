"""Capture an ALiBi model's pre-softmax logits from its own forward (BLOOM, MPT, Falcon).

BLOOM does not run its attention through transformers' ``AttentionInterface``: each
``BloomAttention`` computes its logits as ``alibi.baddbmm(batch1=q, batch2=kᵀ, beta=β,
alpha=α)``, i.e. ``W = β·bias + α·q·kᵀ`` ``[B·H, n, n]`` with ``bias[b·H + h, 0, j] = m_h·j``
(BLOOM's form of −m_h·(i − j): softmax is blind to the per-query constant). posgen hands
each attention module, within the block, its own bias wrapped in a tensor subclass whose
``baddbmm`` is the model's own call, recorded: the logits, q and k are exactly what the
model computed; nothing of attention is re-implemented, and the attention output is the
model's own. The wrapping is :func:`posgen.harness.model_side.alibi.bias.alibi_bias_calls`:
the capture records, and ``logits=`` (:mod:`posgen.harness.model_side.alibi.logits`)
hands back replaced logits, which the model's own code then masks and softmaxes. MPT's
logits are recorded where its attention adds its batch bias to ``q·kᵀ·scale`` (the same
arguments, β = 1); Falcon's where its sdpa call takes the mask that holds its bias, as
``q·kᵀ·(1/√d) + bias`` (bias = alibi/√d, β = 1: :mod:`posgen.harness.model_side.alibi.falcon_sdpa`;
eager attention refused).

Each layer reaches the consumer as an :class:`AlibiCapture` (a
:class:`~.capture.LayerCapture` with the bias): ``logit_block`` gives the full logits
``α·q·kᵀ + β·bias`` (``part="full"``) or the content part ``α·q·kᵀ`` alone
(``part="qk"``); :meth:`AlibiCapture.part` switches. The fit of the full logits has the
bias's linear term built in (it is an exact c[j] = m_h·j, i.e. a[i−j] + b[i]); the fit of
q·k alone shows what the content learned.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import torch

from posgen.harness.model_side import door
from posgen.harness.model_side.alibi.bias import alibi_bias_calls
from posgen.harness.model_side.logits.capture import LayerCapture
from posgen.harness.model_side.logits.layer_mask import LayerMask


@dataclass
class AlibiCapture(LayerCapture):
    """One ALiBi layer: ``query``/``key`` ``[B, H, n, d]`` as the model's baddbmm took them,
    ``bias`` ``[B, H, 1, n]`` (β·m_h·j), ``full_logits`` ``[B, H, n, n]`` the model's own
    baddbmm output; ``include_bias``: whether ``logit_block`` includes the bias."""

    bias: torch.Tensor | None = field(default=None, repr=False)
    full_logits: torch.Tensor | None = field(default=None, repr=False)
    include_bias: bool = True

    @property
    def qk_only(self) -> bool:
        """Whether ``logit_block`` is ``α·q·kᵀ`` alone (the fit may then use q/k sums)."""
        return not self.include_bias

    def part(self, include_bias: bool) -> AlibiCapture:
        """This capture, its ``logit_block`` with or without the bias."""
        return dataclasses.replace(self, include_bias=include_bias, _logits=None)

    def logit_block(
        self, start: int, stop: int, heads: slice = slice(None), width: int | None = None
    ) -> torch.Tensor:
        """Rows start..stop−1, keys 0..width−1: ``α·q·kᵀ`` (+ ``β·bias`` with the bias) —
        with the bias, the model's own recorded logits."""
        width = self.key.shape[-2] if width is None else width
        if self.include_bias:
            return self.full_logits[:, heads, start:stop, :width].float()
        return super().logit_block(start, stop, heads, width)

    def unrotate(self, x: torch.Tensor) -> torch.Tensor:
        """No rotation in an ALiBi model's q·k: the identity."""
        return x

    def rotate(self, x: torch.Tensor) -> torch.Tensor:
        """No rotation in an ALiBi model's q·k: the identity."""
        return x


@contextmanager
def capture_alibi_attention(
    model: torch.nn.Module, consumer: Callable[[AlibiCapture], None]
) -> Iterator[None]:
    """Within the block, every forward of the ALiBi ``model`` calls ``consumer`` once per
    layer with its :class:`AlibiCapture` (batch of full forwards, ``use_cache=False``)."""
    heads = int(model.config.num_attention_heads)

    def on_call(layer: int, attention: torch.nn.Module, kwargs: dict):
        def record(bias, out, q, k_t, beta, alpha) -> None:
            rows, n, keys = out.shape
            b = rows // heads
            mask = LayerMask(None, b, n, keys, True, out.device)
            consumer(
                AlibiCapture(
                    layer=layer,
                    query=q.view(b, heads, n, -1),
                    key=k_t.transpose(-1, -2).reshape(b, heads, keys, -1),
                    value=q.new_zeros(0),
                    module=attention,
                    position_embeddings=None,
                    mask=mask,
                    scaling=float(alpha),
                    kv_heads=heads,
                    bias=(float(beta) * bias).view(b, heads, 1, keys),
                    full_logits=out.view(b, heads, n, keys),
                )
            )

        return record

    with torch.no_grad(), alibi_bias_calls(model, on_call):
        yield


def alibi_capture_forward(model: torch.nn.Module, ids: list[int], consumer) -> None:
    """:func:`..logits.capture.capture_forward` for an ALiBi model: one captured forward
    of ``ids`` (batch 1, no cache, an all-ones mask, inside the door, as there)."""
    dev = next(model.parameters()).device
    with torch.no_grad(), door.forward(model), capture_alibi_attention(model, consumer):
        model.base_model(
            input_ids=torch.tensor([ids], device=dev),
            use_cache=False,
            attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=dev),
        )
