"""The bias an ALiBi attention module (BLOOM, MPT; Falcon's mask) is handed, wrapped: where
the module adds it to q·kᵀ is the module's logits.

BLOOM does not run its attention through transformers' ``AttentionInterface``: each
``BloomAttention`` computes its logits as ``alibi.baddbmm(batch1=q, batch2=kᵀ, beta=β,
alpha=α)``, i.e. ``W = β·bias + α·q·kᵀ`` ``[B·H, n, n]``, then adds its mask, softmaxes
and multiplies by the values. :func:`alibi_bias_calls` hands the chosen layers' attention
modules their own bias wrapped in a tensor subclass whose ``baddbmm`` runs the model's own
call on the plain tensor and hands its inputs and output to a callback, which may return
other logits for the model to go on with. The decomposition's capture records
(:mod:`posgen.harness.model_side.alibi.capture`); ``logits=`` replaces
(:mod:`.logits`). Nothing of attention is re-implemented.

MPT's attention computes ``scores = q·kᵀ·scale`` ``[B, H, n, K]`` and then
``scores + position_bias`` (its one batch bias ``[H, 1, K]``, sliced): it is handed its
bias as a :class:`~.rows.RowBias` whose addition is the model's own, recorded with
the same arguments as BLOOM's (``bias`` broadcast to ``[B·H, 1, K]``, β = 1, α = its
scale). q and k are its ``Wqkv`` output split as its attention splits it, checked at
every call to give its scores bit for bit (a forward with a KV cache, or a release that
splits otherwise, is refused). Where hf-posgen's positions already wrap the block's bias
(:func:`~.rows.bias_replacer`, ``positions=`` in that layer), the recorded addition
is theirs, ``scores + rows(scores, own)``, and the bias recorded the moved one. Falcon's
attention is handed its mask (the bias folded in) wrapped so that the sdpa call taking it
hands its logits to the callback with the same arguments (:func:`.falcon_sdpa.sdpa_mask`;
eager attention is refused).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import torch

from posgen.harness.model_side.alibi.falcon_sdpa import refuse_eager, sdpa_mask
from posgen.harness.model_side.alibi.rows import RowsBias, row_bias, rows_of
from posgen.harness.position_family import PositionFamily, position_family_of


class _WrappedBias(torch.Tensor):
    """The bias a BLOOM attention module is handed; its ``baddbmm`` (the model's logits)
    runs as the plain tensor's and hands its inputs and output to ``_posgen_record``, whose
    answer, where not None, is the logits the model goes on with."""

    def baddbmm(self, batch1, batch2, *, beta=1.0, alpha=1.0) -> torch.Tensor:
        """The model's own call, on the plain tensor, recorded (and maybe replaced)."""
        plain = self.as_subclass(torch.Tensor)
        out = plain.baddbmm(batch1, batch2, beta=beta, alpha=alpha)
        replaced = self._posgen_record(plain, out, batch1, batch2, beta, alpha)
        return out if replaced is None else replaced


def _wrapped(bias: torch.Tensor, record: Callable[..., torch.Tensor | None]) -> torch.Tensor:
    wrapped = bias.as_subclass(_WrappedBias)
    wrapped._posgen_record = record
    return wrapped


#: ``on_call(layer, attention, kwargs) -> record``: for one call of a layer's attention
#: module (``kwargs``: the keywords it was called with), the function its bias's
#: ``baddbmm`` hands ``(bias, W, q, kᵀ, β, α)`` to (``bias`` [B·H, 1, K] plain, ``W``
#: [B·H, n, K] the model's logits, ``q`` [B·H, n, d], ``kᵀ`` [B·H, d, K]); it returns the
#: logits the model goes on with, None for its own W.
OnCall = Callable[[int, torch.nn.Module, dict], Callable[..., torch.Tensor | None]]


#: the keyword each form's attention module takes its bias under
BIAS_KEYWORDS = {"bloom": "alibi", "mpt": "position_bias", "falcon": "attention_mask"}
#: where each keyword's bias forms the logits
_WHERE = {
    "alibi": "alibi.baddbmm(q, kᵀ)",
    "position_bias": "scores + position_bias",
    "attention_mask": "scaled_dot_product_attention(attn_mask=its mask)",
}


def _keyword(family: PositionFamily) -> str:
    if family.logits_refused or family.bias_form not in BIAS_KEYWORDS:
        raise RuntimeError(family.logits_refused or f"{family.name}: no ALiBi logits to capture")
    return BIAS_KEYWORDS[family.bias_form]


@contextmanager
def alibi_bias_calls(
    model: torch.nn.Module, on_call: OnCall, layers: Sequence[int] | None = None
) -> Iterator[None]:
    """Within the block, the attention module of each layer in ``layers`` (None: every
    layer) of the ALiBi ``model`` is handed its bias wrapped: where it adds the bias (the
    model's own logits) calls ``on_call``'s function. A call of the module that computes
    no logits through it is refused (a transformers release whose attention no longer
    calls ``alibi.baddbmm``, or adds MPT's bias elsewhere, would otherwise pass unseen).
    Falcon's are where its sdpa call takes its mask (:mod:`.falcon_sdpa`)."""
    family = position_family_of(model)
    name = _keyword(family)
    if family.bias_form == "falcon":
        refuse_eager(model)
    called: list[bool] = []

    def hooks_for(layer: int, attention: torch.nn.Module, qkv: list[torch.Tensor]):
        def pre_hook(module, args, kwargs):
            record = on_call(layer, attention, kwargs)
            called.append(False)

            def seen(*given) -> torch.Tensor | None:
                called[-1] = True
                return record(*given)

            if family.bias_form == "mpt":
                given, rows = kwargs[name], rows_of(kwargs[name])
                add = _mpt_add(module, qkv, seen, rows)
                return args, {**kwargs, name: row_bias(given.as_subclass(torch.Tensor), add, rows)}
            if family.bias_form == "falcon":
                return args, {**kwargs, name: sdpa_mask(kwargs.get(name), seen)}
            return args, {**kwargs, name: _wrapped(kwargs[name], seen)}

        def post_hook(module, args, kwargs, output):
            if not called.pop():
                raise RuntimeError(
                    f"{type(module).__name__} did not compute its logits as {_WHERE[name]}; "
                    "posgen is tested with transformers 5.24's BLOOM and MPT attention and "
                    "5.24's and 5.25's Falcon"
                )

        return pre_hook, post_hook

    chosen = set(range(len(family.blocks(model)))) if layers is None else set(layers)
    with ExitStack() as stack:
        for layer, block in enumerate(family.blocks(model)):
            if layer in chosen:
                attention, qkv = getattr(block, family.attention), []
                for handle in _register(family, attention, qkv, hooks_for(layer, attention, qkv)):
                    stack.callback(handle.remove)
        yield


def _register(family, attention: torch.nn.Module, qkv: list[torch.Tensor], hooks) -> list:
    """The pre- and post-hook on ``attention``'s forward (and, on MPT, the hook that keeps
    its q and k: the Wqkv output it splits); returns their handles."""
    pre, post = hooks
    handles = [
        attention.register_forward_pre_hook(pre, with_kwargs=True),
        attention.register_forward_hook(post, with_kwargs=True),
    ]
    if family.bias_form == "mpt":
        handles.append(attention.Wqkv.register_forward_hook(_keeper(qkv)))
    return handles


def _keeper(kept: list[torch.Tensor]) -> Callable[..., None]:
    """A forward hook that keeps a module's latest output in ``kept``."""

    def keep(module: torch.nn.Module, args: tuple, output: torch.Tensor) -> None:
        kept[:] = [output]

    return keep


def _mpt_add(
    attention: torch.nn.Module,
    qkv: list[torch.Tensor],
    seen: Callable[..., Any],
    rows: RowsBias | None = None,
):
    """MPT's ``scores + own`` (its logits ``[B, H, n, K]``), recorded as BLOOM's are; with
    ``rows`` (hf-posgen's positions moved in this block) ``scores + rows(scores, own)``,
    the addition the positions' :class:`~.rows.RowBias` makes, recorded with that
    bias."""

    def add(scores: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
        added = own[None] if rows is None else rows(scores, own)  # [1 or B, H, 1, K]
        out = scores + added  # the model's own addition (or the positions' wrapper's)
        b, heads, n, keys = out.shape
        mixed = qkv[0]
        if attention.clip_qkv:
            mixed = mixed.clamp(min=-attention.clip_qkv, max=attention.clip_qkv)
        q, k, _ = (x.reshape(b, n, heads, -1).transpose(1, 2) for x in mixed.chunk(3, dim=2))
        scale = attention.softmax_scale
        if keys != n or not torch.equal(torch.matmul(q, k.transpose(-1, -2)) * scale, scores):
            raise RuntimeError(
                "MPT's scores are not q·kᵀ·scale of its Wqkv output over this forward's "
                "tokens; posgen captures full forwards without a KV cache (transformers 5.24)"
            )
        d = q.shape[-1]
        bias = added.expand(b, heads, 1, keys).reshape(b * heads, 1, keys)
        flat_k = k.transpose(-1, -2).reshape(b * heads, d, keys)
        replaced = seen(
            bias, out.reshape(b * heads, n, keys), q.reshape(b * heads, n, d), flat_k, 1.0, scale
        )
        return out if replaced is None else replaced.view(b, heads, n, keys)

    return add
