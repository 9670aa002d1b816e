"""Where ``logits=`` enters: posgen's attention function replaces the logits on the forward.

posgen registers one attention function per base implementation with
``transformers.AttentionInterface`` under ``posgen_logits_<base>`` (``sdpa`` or
``eager``), with that implementation's mask function under the same name, through
:func:`posgen.compat.using_attention`. In a layer outside ``layers=`` it calls the
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
   band F is solved from its structure) gives the form's logits W' (:mod:`.logit_forms`);
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
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any

import torch

from posgen.compat import base_implementation, using_attention
from posgen.harness.additive_fit.causal_layout import CausalLayout
from posgen.harness.additive_fit.logit_fit import (
    FitOptions,
    LayoutCache,
    fit_sums,
    fit_terms,
    head_sums,
)
from posgen.harness.additive_fit.qk_sums import grouped_fit_sums
from posgen.harness.hf_posgen.logit_forms import (
    SHUFFLE_STREAM,
    LogitDonor,
    LogitForm,
    logit_change,
    reversed_form_logits,
)
from posgen.harness.hf_posgen.qk_noise import base_forward
from posgen.harness.model_family import family_of
from posgen.perturbations.seeding import standard_normal, stream_seed

_PREFIX = "posgen_logits_"
BASES = ("sdpa", "eager")


@dataclass
class LogitReplacement:
    """What the attention function needs for one forward (or several)."""

    form: LogitForm
    layers: tuple[int, ...] | None = None  # None: every layer
    heads: tuple[int, ...] | None = None  # None: every query head
    seed: int = 0
    keys: tuple[bytes, ...] = ()  # per batch row, the key of its tokens (``shuffled``)
    lengths: tuple[int, ...] | None = None  # per batch row, its real tokens (the plan's)
    donor: LogitDonor | None = None  # ``foreign``
    layouts: LayoutCache = field(default_factory=LayoutCache)
    options: FitOptions = field(default_factory=FitOptions)
    _masks: tuple | None = field(default=None, repr=False)  # (mask, shape, MaskRows)

    def acts_in(self, layer: int) -> bool:
        return self.layers is None or layer in self.layers

    def mask_rows(self, attention_mask, query, key, module, kwargs) -> MaskRows:
        """The :class:`MaskRows` of this call's mask: the previous layer's when the model
        passed the same mask object for the same shapes (one per forward, as a rule)."""
        shape = (query.shape[0], query.shape[2], key.shape[2], query.dtype)
        last = self._masks
        if last is not None and last[0] is attention_mask and last[1] == shape:
            return last[2]
        attended = attended_entries(attention_mask, query, key, module, kwargs)
        rows, whole = [], True
        for row, m in enumerate(self.row_lengths(attended)):
            fitted = self.options.apply(attended[row, :m, :m])
            layout = fit_layout(self.layouts, fitted, self.options)
            rows.append((m, fitted, layout))
            whole = whole and isinstance(layout, CausalLayout)
            whole = whole and torch.equal(fitted, attended[row, :m, :m])
        low = torch.finfo(query.dtype).min
        additive = torch.where(attended[:, None], 0.0, low).to(query.dtype)
        found = MaskRows(additive, rows, whole)
        self._masks = (attention_mask, shape, found)  # holds the mask: its id stays unique
        return found

    def row_lengths(self, attended: torch.Tensor) -> list[int]:
        """m per row of ``attended`` [B, n, keys]: ``lengths`` where given, checked against
        the mask (one that marks padding must mark the same), else the mask's. Without
        ``lengths`` a batch whose mask marks no padding is refused: it cannot be told from
        a padded one called with no mask."""
        b, n = attended.shape[:2]
        masked = [real_length(attended[row]) for row in range(b)]
        if self.lengths is None:
            if b > 1 and all(m == n for m in masked):
                raise RuntimeError(
                    f"logits= cannot tell the real tokens of a batch of {b} rows whose mask "
                    "marks no padding: give LogitReplacement(lengths=...) (the batch plan's)"
                )
            return masked
        if len(self.lengths) != b or any(not 0 < m <= n for m in self.lengths):
            raise RuntimeError(f"logits=: row lengths {self.lengths} do not fit {b} rows of {n}")
        for row, (m, seen) in enumerate(zip(self.lengths, masked, strict=True)):
            if seen not in (m, n):
                raise RuntimeError(
                    f"logits=: row {row} has {m} real tokens by its request but the attention "
                    f"mask gives it {seen}; pass a mask that agrees, or none"
                )
        return list(self.lengths)

    def replaces_whole_logits(self, query, masks: MaskRows, softcap) -> bool:
        """Whether this call takes the route of the whole logits (module doc)."""
        plain_form = self.form.name != "shuffled" and self.heads is None
        exact_dtype = query.dtype in (torch.float32, torch.float64)
        return plain_form and exact_dtype and softcap is None and masks.fit_is_mask


@dataclass
class MaskRows:
    """One mask's additive form [B, 1, n, keys], per row (m, F [m, m], layout), whether
    every row's F is all its real tokens attend and structured (``fit_is_mask``), and the
    buffers that the layers of one forward reuse (allocating the [B, H, n, keys] mask per
    layer costs more in page faults than writing it)."""

    additive: torch.Tensor
    rows: list[tuple[int, torch.Tensor, Any]]
    fit_is_mask: bool = False
    buffers: dict = field(default_factory=dict, repr=False)

    def buffer(self, name: str, like: torch.Tensor, shape: tuple[int, ...]) -> torch.Tensor:
        """A reusable tensor of ``shape`` with ``like``'s dtype and device."""
        key = (name, shape, like.dtype, like.device)
        if key not in self.buffers:
            self.buffers[key] = torch.empty(shape, dtype=like.dtype, device=like.device)
        return self.buffers[key]

    def zero_query(self, query: torch.Tensor) -> torch.Tensor:
        """Zeros of ``query``'s shape (made once per forward; nothing writes to them)."""
        key = ("zero query", tuple(query.shape), query.dtype, query.device)
        if key not in self.buffers:
            self.buffers[key] = torch.zeros_like(query)
        return self.buffers[key]


_ACTIVE: ContextVar[LogitReplacement | None] = ContextVar("posgen_logit_replacement", default=None)


def attention_name(base: str) -> str:
    """The registered name of the replacement around ``base`` (``sdpa``, ``eager``)."""
    return _PREFIX + base


@contextmanager
def logits_replaced(model: torch.nn.Module, replacement: LogitReplacement) -> Iterator[None]:
    """Within the block, forwards of ``model`` replace the logits of ``replacement``'s
    layers and heads by its form; the model's own attention is restored on exit."""
    base = base_implementation(model)
    if base not in BASES:
        raise ValueError(
            f"logits={replacement.form.name} runs over sdpa or eager attention; the model "
            f"runs {base!r} (load it with --attn-implementation sdpa)"
        )
    if replacement.form.needs_donor and replacement.donor is None:
        raise ValueError("logits=foreign needs a donor sequence's fit (LogitDonor)")
    make = lambda: _make_forward(base)  # noqa: E731
    try:
        with using_attention(model, attention_name(base), make, base, base, (_ACTIVE, replacement)):
            yield
    finally:
        replacement._masks = None  # the last forward's mask and buffers: [B, H, n, n] each


def _make_forward(base: str) -> Callable[..., Any]:
    def forward(module, query, key, value, attention_mask, **kwargs):
        state = _ACTIVE.get()
        if state is None:
            raise RuntimeError(
                f"attention implementation {attention_name(base)!r} was called outside "
                "posgen's logits= context; use HFPosgenLM"
            )
        layer = int(module.layer_idx)
        run = base_forward(base, module)
        if not state.acts_in(layer):
            return run(module, query, key, value, attention_mask, **kwargs)
        if query.shape[2] != key.shape[2]:
            raise RuntimeError("logits= replaces whole forwards only (no KV cache, no generate)")
        masks = state.mask_rows(attention_mask, query, key, module, kwargs)
        attend = _attend(base, module, kwargs.get("softcap"))
        if state.replaces_whole_logits(query, masks, kwargs.get("softcap")):
            scores = fit_logits(state, module, layer, query, key, masks, kwargs)
            out, weights = attend(module, masks.zero_query(query), key, value, scores, **kwargs)
            return out.flip(1), None if weights is None else weights.flip(2)  # rows back
        delta = logit_delta(state, module, layer, query, key, masks.rows, kwargs)
        mask = delta.to(query.dtype).add_(masks.additive)
        out, weights = attend(module, query, key, value, mask, **kwargs)
        if state.heads is None:
            return out, weights
        plain, plain_weights = run(module, query, key, value, attention_mask, **kwargs)
        heads = list(state.heads)
        plain = plain.clone()
        plain[:, :, heads] = out[:, :, heads]  # [B, T, H, d]
        if plain_weights is not None and weights is not None:
            plain_weights = plain_weights.clone()
            plain_weights[:, heads] = weights[:, heads]
        return plain, plain_weights

    forward.__name__ = f"posgen_logits_{base}_forward"
    return forward


def _attend(base: str, module: torch.nn.Module, softcap: Any) -> Callable[..., Any]:
    """The attention that takes the replaced logits as a float mask (module doc)."""
    own_sdpa = base == "sdpa" and softcap is None and getattr(module, "sinks", None) is None
    return base_forward(base if own_sdpa else "eager", module)


def attended_entries(attention_mask, query, key, module, kwargs) -> torch.Tensor:
    """[B, n, keys] bool, True where the layer attends: the mask the model passed (bool for
    sdpa, additive for eager; [B, 1, n, keys]), or, where sdpa was given none (an unpadded
    causal forward), the causal mask."""
    b, n, keys = query.shape[0], query.shape[2], key.shape[2]
    if attention_mask is None:
        causal = kwargs.get("is_causal")
        causal = bool(getattr(module, "is_causal", True) if causal is None else causal)
        full = torch.ones(n, keys, dtype=torch.bool, device=query.device)
        return (full.tril(keys - n) if causal else full).expand(b, n, keys)
    mask = attention_mask[:, 0, :, :keys]
    if mask.dtype == torch.bool:
        return mask
    return mask > torch.finfo(mask.dtype).min / 2


def fit_logits(state, module, layer, query, key, masks: MaskRows, kwargs) -> torch.Tensor:
    """The scores of the route of the whole logits (module doc), **query rows reversed**:
    [B, H, n, keys] in the query's dtype, where ``scores[r, h, n − 1 − i, j]`` is, per row r,
    the form's logit W'[i, j] on its fitted entries (all its real tokens attend), 0 on the
    other entries the layer attends (the queries of padding: their outputs are not read),
    the dtype's minimum elsewhere. The query is zero, so the row order is the scores' alone:
    reversed, the distance term is a strided view (:func:`.logit_forms.reversed_form_logits`),
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
        fits = fit_sums(head_sums(w, layout, dtype=torch.float32), layout)
        change = logit_change(
            state.form,
            w,
            fits,
            fitted,
            donor_a=None if state.donor is None else state.donor.distance_term(layer, heads, m),
            shuffle_keys=_shuffle_keys(state, layer, row, h, m, query.device, heads),
            out=delta[0] if whole else None,
        )
        if not whole:
            delta[row, heads, :m, :m] = change
    return delta


def real_length(attended: torch.Tensor) -> int:
    """m, the row's real tokens: the keys some query attends ([n, keys] bool), which must be
    the first m (HFLM right-pads)."""
    used = attended.any(0)
    m = int(used.sum())
    if m == 0 or not bool(used[:m].all()):
        raise RuntimeError("logits= needs right-padded rows (the real tokens first)")
    return m


def fit_layout(layouts: LayoutCache, fitted: torch.Tensor, options: FitOptions):
    """The layout of the fitted entries ``fitted`` [m, m]: the structured causal or band
    layout where F is one of them, else the dense layout of F."""
    m, dev = fitted.shape[-1], fitted.device
    causal = torch.ones(m, m, dtype=torch.bool, device=dev).tril()
    if torch.equal(fitted, causal):
        return layouts.causal(m, options, dev)
    width = int(fitted[-1].sum())
    if 0 < width < m and torch.equal(fitted, causal.triu(1 - width)):
        return layouts.causal(m, options, dev, window=width)
    return layouts.get(fitted, dev)


def _shuffle_keys(state, layer, row, h, m, device, heads) -> torch.Tensor | None:
    """Random sort keys [P, m, m] for ``shuffled``, drawn for every head of the layer from
    (seed, layer, the row's token key): the same in any batch and for any ``heads=``."""
    if state.form.name != "shuffled":
        return None
    if len(state.keys) <= row:
        raise RuntimeError("logits=shuffled needs each row's token key (the batch plan)")
    seed64 = stream_seed(state.seed, SHUFFLE_STREAM, state.keys[row] + layer.to_bytes(4, "little"))
    return standard_normal(seed64, (h, m, m), device)[heads]
