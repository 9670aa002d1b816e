"""Where ``logits=`` enters: posgen's attention function replaces the logits on the forward.

The function is ``posgen_logits_<base>`` (``sdpa`` or ``eager``, with that
implementation's mask function), :data:`LOGITS_ATTENTION`, registered, installed and
removed by :mod:`..attention.wrapper`. In a layer outside ``layers=`` it calls the
model's own implementation unchanged. In a chosen layer, for each row of the batch:

1. the row's real tokens are its first m of the n slots (HFLM right-pads), m what the
   request says: the batch plan's ``lengths`` (HFLM calls the model with no attention
   mask, so the mask cannot tell padding from tokens); an attention mask that marks
   padding must agree with them, and without ``lengths`` it alone gives m. The fitted
   entries F are the entries the layer attends among the m with j ≤ i (the causal mask,
   or the model's own, e.g. a sliding window): padding never enters a fit;
2. the logits of the chosen heads (all, or ``heads=``), as the model scores them, are
   ``W = q @ repeat_kv(k)ᵀ · scaling`` over F, from the model's own post-RoPE q and k
   (then the layer's soft-capping, tanh(W / cap) · cap);
3. the exact fit of W over F (:mod:`posgen.harness.additive_fit.logit_fit`; a causal or
   band F is solved from its structure) gives the form's logits W' (:mod:`.forms`);
4. the model's own attention runs with W' as its scores, and its softmax and value
   product as usual: transformers' ``sdpa`` function (a float mask) where the model runs
   sdpa, else (eager, soft-capping, attention sinks) the family's own eager attention.
   Nothing of attention or RoPE is re-implemented.

Step 4 takes one of two exact routes:

- **The whole of the logits** (every head, F all the layer attends, no soft-capping, a
  form without the residual, float32/64): the attention function gets a zero query, so
  its scores are 0, and the additive mask W' on F, the dtype's minimum elsewhere, so its
  softmax sees W' itself. The fit's sums come straight from q and k
  (:mod:`posgen.harness.additive_fit.qk_sums`, float64, no [n, n] logit map): the cost
  per layer is O(n d log n) sums, an O(n) solve, and three passes writing W'.
- **Otherwise** (``heads=``, ``shuffled``, soft-capping, options that leave attended
  entries out of F, half precision): W is computed ([P, m, m] float32) and the mask
  carries δ = W' − W on F, 0 on the other attended entries: the attention function
  computes W again and adds the mask, so its softmax sees W + δ = W' (to float rounding).
  With ``heads=`` the model's own implementation also runs, and the other heads' outputs
  are taken from it (bit for bit what plain ``hf`` computes).

Forwards with a KV cache (``generate``) are refused: the fit needs the full rows.

Steps 1 and 3 (each row's m and F, the fit and the form's change) are
:mod:`.rows`'s. BLOOM computes its logits outside these functions:
:func:`logits_replaced` hands it to :mod:`..alibi.logits`, which replaces them
where BLOOM computes them, with the same rows, fit and forms.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from posgen.compat import base_implementation
from posgen.harness.additive_fit.logit_fit import fit_terms
from posgen.harness.additive_fit.qk_sums import grouped_fit_sums
from posgen.harness.model_family import family_of
from posgen.harness.model_side.alibi.logits import alibi_logits_replaced
from posgen.harness.model_side.attention.wrapper import (
    OwnAttention,
    WrappedAttention,
    own_attention_function,
)
from posgen.harness.model_side.logits.forms import reversed_form_logits
from posgen.harness.model_side.logits.rows import LogitReplacement, MaskRows
from posgen.harness.position_family import position_family_of

BASES = ("sdpa", "eager")


def _layer_call(
    state: LogitReplacement, own: OwnAttention, module, query, key, value, attention_mask, **kwargs
):
    """One layer's attention call under ``state`` (module doc): the model's own outside
    its layers, else the logits replaced by one of the two routes."""
    layer = int(module.layer_idx)
    if not state.acts_in(layer):
        return own(module, query, key, value, attention_mask, **kwargs)
    if query.shape[2] != key.shape[2]:
        raise RuntimeError("logits= replaces whole forwards only (no KV cache, no generate)")
    masks = state.mask_rows(attention_mask, query, key, module, kwargs)
    attend = _attend(own, module, kwargs.get("softcap"))
    if state.replaces_whole_logits(query, masks, kwargs.get("softcap")):
        scores = fit_logits(state, module, layer, query, key, masks, kwargs)
        out, weights = attend(module, masks.zero_query(query), key, value, scores, **kwargs)
        return out.flip(1), None if weights is None else weights.flip(2)  # rows back
    delta = logit_delta(state, module, layer, query, key, masks.rows, kwargs)
    mask = delta.to(query.dtype).add_(masks.additive)
    out, weights = attend(module, query, key, value, mask, **kwargs)
    if state.heads is None:
        return out, weights
    plain, plain_weights = own(module, query, key, value, attention_mask, **kwargs)
    heads = list(state.heads)
    plain = plain.clone()
    plain[:, :, heads] = out[:, :, heads]  # [B, T, H, d]
    if plain_weights is not None and weights is not None:
        plain_weights = plain_weights.clone()
        plain_weights[:, heads] = weights[:, heads]
    return plain, plain_weights


LOGITS_ATTENTION = WrappedAttention(
    "posgen_logits_", "logits=", "posgen's logits= context; use HFPosgenLM", _layer_call
)


@contextmanager
def logits_replaced(model: torch.nn.Module, replacement: LogitReplacement) -> Iterator[None]:
    """Within the block, forwards of ``model`` replace the logits of ``replacement``'s
    layers and heads by its form; the model's own attention is restored on exit. An ALiBi
    model (BLOOM, Falcon-ALiBi), whose attention bypasses the attention functions, has its
    logits replaced where it computes them (:mod:`..alibi.logits`)."""
    if replacement.form.needs_donor and replacement.donor is None:
        raise ValueError("logits=foreign needs a donor sequence's fit (LogitDonor)")
    if position_family_of(model).kind == "alibi":
        with alibi_logits_replaced(model, replacement):
            yield
        return
    base = base_implementation(model)
    if base not in BASES:
        raise ValueError(
            f"logits={replacement.form.name} runs over sdpa or eager attention; the model "
            f"runs {base!r} (load it with --attn-implementation sdpa)"
        )
    try:
        with LOGITS_ATTENTION.active(model, replacement):
            yield
    finally:
        replacement._masks = None  # the last forward's mask and buffers: [B, H, n, n] each


def _attend(own: OwnAttention, module: torch.nn.Module, softcap: Any) -> Callable[..., Any]:
    """The attention that takes the replaced logits as a float mask (module doc): the
    model's own sdpa where it runs sdpa, else the family's eager attention."""
    own_sdpa = own.base == "sdpa" and softcap is None and getattr(module, "sinks", None) is None
    return own.function if own_sdpa else own_attention_function("eager", module)


def fit_logits(state, module, layer, query, key, masks: MaskRows, kwargs) -> torch.Tensor:
    """The scores of the route of the whole logits (module doc), **query rows reversed**:
    [B, H, n, keys] in the query's dtype, where ``scores[r, h, n − 1 − i, j]`` is, per row r,
    the form's logit W'[i, j] on its fitted entries (all its real tokens attend), 0 on the
    other entries the layer attends (the queries of padding: their outputs are not read),
    the dtype's minimum elsewhere. The query is zero, so the row order is the scores' alone:
    reversed, the distance term is a strided view (:func:`.forms.reversed_form_logits`),
    and the caller reverses the attention's output rows back."""
    b_size, h, n = query.shape[:3]
    grouped = grouped_like_repeat_kv(module, key.shape[1], h)  # else each query head's keys
    keys = key if grouped else family_of(module).expand_kv(module, key, h)
    scaling = kwargs.get("scaling")
    scaling = module.head_dim**-0.5 if scaling is None else scaling
    shape = (b_size, h, n, key.shape[2])
    whole = b_size == 1 and masks.rows[0][0] == n  # W' written straight into the scores
    scores = masks.buffer("scores", query, shape)
    if not whole:
        scores.copy_(masks.additive.expand(shape).flip(2))
    heads = list(range(h))
    for row, (m, _, layout) in enumerate(masks.rows):
        sums = grouped_fit_sums(query[row, :, :m], keys[row, :, :m], layout, scaling)
        a, b, c = fit_terms(*sums, layout)
        donor = None if state.donor is None else state.donor.distance_term(layer, heads, m)
        if whole:
            reversed_form_logits(state.form, a, b, c, scores[0], donor)
        else:  # the row's real queries are its first m: the last m once reversed
            block = torch.empty_like(scores[row, :, :m, :m])
            scores[row, :, n - m :, :m] = reversed_form_logits(state.form, a, b, c, block, donor)
    return scores


def grouped_like_repeat_kv(module, kv_heads: int, heads: int) -> bool:
    """Whether the family's ``repeat_kv`` gives query head p the key head p // g (then the
    sums read each key head once for its g query heads)."""
    index = torch.arange(kv_heads, dtype=torch.float32).view(1, kv_heads, 1, 1)
    spread = family_of(module).expand_kv(module, index, heads).flatten()
    return torch.equal(spread, (torch.arange(heads) // (heads // kv_heads)).float())


def logit_delta(state, module, layer, query, key, rows, kwargs) -> torch.Tensor:
    """δ = W' − W [B, H, n, keys] float32 (module doc), 0 off each row's fitted entries and
    for heads outside ``heads=``; ``rows``: per batch row (m, F, layout)."""
    b_size, h, n = query.shape[:3]
    heads = list(range(h)) if state.heads is None else list(state.heads)
    if max(heads) >= h:
        raise RuntimeError(f"heads={heads}: layer {layer} has {h} query heads")
    keys_full = family_of(module).expand_kv(module, key, h)
    scaling = kwargs.get("scaling")
    scaling = module.head_dim**-0.5 if scaling is None else scaling
    softcap = kwargs.get("softcap")
    whole = b_size == 1 and len(heads) == h and rows[0][0] == n  # δ written in place
    make = torch.empty if whole else torch.zeros
    delta = make(b_size, h, n, key.shape[2], dtype=torch.float32, device=query.device)
    for row, (m, fitted, layout) in enumerate(rows):
        w = torch.matmul(query[row, heads, :m].float(), keys_full[row, heads, :m].float().mT)
        w.mul_(scaling)
        if softcap is not None:
            w = torch.tanh(w / softcap) * softcap
        change = state.row_change(
            layer, row, w, (fitted, layout), (h, heads), delta[0] if whole else None
        )
        if not whole:
            delta[row, heads, :m, :m] = change
    return delta
