"""Where ``logits=`` enters an ALiBi model (BLOOM, MPT): the logits its own attention forms.

BLOOM's and MPT's attention bypass transformers' attention functions (the route of
:mod:`..logits.replacement`). Each ``BloomAttention`` computes its logits as
``alibi.baddbmm(batch1=q, batch2=kᵀ, beta=β, alpha=α)``,

    W = β·bias + α·q·kᵀ   [B·H, n, n],   bias[b·H + h, 0, j] = m_h·j

(BLOOM's form of −m_h·(i − j): softmax is blind to the per-query constant), then adds
its mask, softmaxes and multiplies by the values. Each ``MptAttention`` computes
``scores = q·kᵀ·scale`` and ``W = scores + position_bias`` ``[B, H, n, n]``, its bias
m_h·(j − n + 1) (the last n columns of its one batch bias), then
``masked_fill(attention_mask, min)`` with a **boolean mask, True where masked**, and
softmaxes. Within the block, each chosen layer's attention module is handed its bias
wrapped as the decomposition's capture wraps it (:func:`.bias.alibi_bias_calls`):
the wrapped ``baddbmm`` (BLOOM) or addition (MPT) is the model's own call, and it
returns, in place of W, for each row of the batch:

1. the row's real tokens, its first m of the n slots (HFLM right-pads and passes no
   mask), m the batch plan's ``lengths`` checked against the mask the model hands its
   attention (``[B, 1, n, n]``: BLOOM's additive, MPT's boolean read inverted, any
   other MPT mask refused), as :meth:`.LogitReplacement.mask_rows` reads it on RoPE
   models; F the entries the layer attends among the m (causal): padding never enters
   a fit;
2. **what is fitted: the full logits W, bias included**, the model's own pre-softmax
   logits (what the decomposition's ``logit_part=full`` fits), of the chosen heads (all,
   or ``heads=``), float32. The bias is exactly additive: m_h·j = −m_h·(i − j) + m_h·i,
   and the fit's normalisation (c without linear trend) puts it in a[i−j] + b[i]. So
   ``additive`` keeps the bias whole and removes q·k's non-additive part only (a head
   whose logits are the bias alone is unchanged); ``distance`` keeps the bias plus what
   q·k made of the distance; ``key`` (b[i] + c[j]) drops the bias with every linear trend
   in j; ``foreign`` takes a' from another sequence's fit of its full logits
   (:func:`posgen.harness.decomposition.predicted_change.distance_terms`); ``shuffled``
   permutes the residual of the full logits within each row;
3. the form's logits W' = W + (W' − W) on F (:meth:`.LogitReplacement.row_change`, the
   fit and forms of RoPE models: :mod:`posgen.harness.additive_fit.logit_fit`,
   :mod:`..logits.forms`), W itself elsewhere and in the heads outside ``heads=`` (bit for
   bit what plain ``hf`` computes there), in W's dtype;
4. the model's own code masks, softmaxes (float32) and multiplies by the values: nothing
   of attention is re-implemented. Layers outside ``layers=`` are not touched. On MPT
   with hf-posgen's positions moved in the layer (``positions=``), W is the scores plus
   the moved bias, as that wrapper adds it.

A forward with a KV cache (fewer queries than keys: ``generate``) is refused: the fit
needs whole rows. W is the [B·H, n, n] map the model materialises anyway; the fit adds
O(n²) per head and row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager

import torch

from posgen.harness.model_side.alibi.bias import alibi_bias_calls
from posgen.harness.model_side.logits.rows import LogitReplacement
from posgen.harness.position_family import position_family_of


@contextmanager
def alibi_logits_replaced(model: torch.nn.Module, replacement: LogitReplacement) -> Iterator[None]:
    """Within the block, forwards of the ALiBi ``model`` replace the full logits of
    ``replacement``'s layers and heads by its form (module doc)."""
    family = position_family_of(model)
    if family.refusal:
        raise ValueError(f"logits={replacement.form.name}: {family.refusal}")
    heads = int(model.config.num_attention_heads)
    if replacement.heads is not None and max(replacement.heads) >= heads:
        raise ValueError(f"heads={list(replacement.heads)}: the model has {heads} query heads")

    attended = _attended_reader(family.bias_form)

    def on_call(layer: int, attention: torch.nn.Module, kwargs: dict):
        mask = attended(kwargs.get("attention_mask"))

        def replace(bias, logits, query, key_t, beta, alpha) -> torch.Tensor:
            qk = (query, key_t)
            return replaced_logits(replacement, (layer, heads), attention, logits, qk, mask)

        return replace

    try:
        with alibi_bias_calls(model, on_call, replacement.layers):
            yield
    finally:
        replacement._masks = None  # the last forward's mask rows


def replaced_logits(
    state: LogitReplacement,
    where: tuple[int, int],
    module: torch.nn.Module,
    logits: torch.Tensor,
    qk: tuple[torch.Tensor, torch.Tensor],
    attention_mask: torch.Tensor | None,
) -> torch.Tensor:
    """W' [B·H, n, n] in the dtype of ``logits`` W [B·H, n, n] (BLOOM's baddbmm output,
    MPT's ``scores + position_bias``): per batch row, the form's logits on its fitted
    entries in the chosen heads, W elsewhere (module doc). ``where``: (the layer, its H
    heads); ``qk``: q [B·H, n, d] and kᵀ [B·H, d, n]; ``attention_mask``: the mask
    ``module`` is handed, as :func:`..logits.rows.attended_entries` reads it ([B, 1, n, n]
    additive, or bool with True where attended; or None)."""
    rows_h, n, keys = logits.shape
    if n != keys:
        raise RuntimeError("logits= replaces whole forwards only (no KV cache, no generate)")
    layer, h = where
    b = rows_h // h
    query = qk[0].reshape(b, h, n, -1)  # [B, H, n, d], as mask_rows reads shapes
    key = qk[1].transpose(-1, -2).reshape(b, h, keys, -1)
    masks = state.mask_rows(attention_mask, query, key, module, {})
    heads = list(range(h)) if state.heads is None else list(state.heads)
    own = logits.view(b, h, n, keys)
    out = own.clone()
    for row, (m, fitted, layout) in enumerate(masks.rows):
        w = own[row, heads, :m, :m].float()  # [P, m, m]
        change = state.row_change(layer, row, w, (fitted, layout), (h, heads))
        out[row, heads, :m, :m] = change.add_(w).to(out.dtype)
    return out.view(rows_h, n, keys)


def _attended_reader(bias_form: str) -> Callable[[torch.Tensor | None], torch.Tensor | None]:
    """The mask each form's attention is handed, as :func:`..logits.rows.attended_entries`
    reads it: BLOOM's (additive) as it is; MPT's boolean mask, True where **masked** (its
    attention does ``masked_fill(attention_mask, min)``), inverted, each mask once (the
    layers of a forward share one, which :meth:`.LogitReplacement.mask_rows` reads once)."""
    if bias_form != "mpt":
        return lambda mask: mask
    last: list[torch.Tensor] = []  # [MPT's mask, its inverse]

    def attended(mask: torch.Tensor | None) -> torch.Tensor:
        if last and last[0] is mask:
            return last[1]
        last[:] = [mask, _mpt_attended(mask)]
        return last[1]

    return attended


def _mpt_attended(mask: torch.Tensor | None) -> torch.Tensor:
    """True where MPT's attention attends ``[B, 1, n, K]``, from the mask it is handed:
    boolean, True where masked, the future of every query masked. Any other form is
    refused (a release that hands MPT another mask would otherwise be misread)."""
    if mask is None or mask.dtype != torch.bool or mask.ndim != 4:
        form = "none" if mask is None else f"{mask.dtype} {tuple(mask.shape)}"
        raise RuntimeError(
            f"MPT's attention was handed the mask {form}; logits= reads MPT's boolean "
            "[B, 1, n, K] mask, True where masked (transformers 5.24 and 5.25)"
        )
    n, keys = mask.shape[-2:]
    future = torch.ones(n, keys, dtype=torch.bool, device=mask.device).triu(keys - n + 1)
    if not bool(mask[..., future].all()):
        raise RuntimeError(
            "MPT's attention mask leaves a query's future keys unmasked: it is not MPT's "
            "boolean mask, True where masked (transformers 5.24 and 5.25); logits= cannot "
            "read it"
        )
    return ~mask
