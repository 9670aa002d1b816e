"""What ``logits=`` replaces in one forward, row by row, whatever computes the logits.

A :class:`LogitReplacement` holds the form and where it applies (``layers=``,
``heads=``), the batch plan's row lengths and token keys, and the fit's layouts. For the
mask a layer is handed it gives each batch row's real tokens m (the plan's ``lengths``,
checked against the mask: HFLM right-pads and passes none), the fitted entries F among
them and F's layout (:meth:`LogitReplacement.mask_rows`, a :class:`MaskRows`), and for
one row's logits W [P, m, m] the change W' − W of the form's logits from the exact fit
of W over F (:meth:`LogitReplacement.row_change`: :mod:`posgen.harness.additive_fit.logit_fit`
and :mod:`.forms`). The attention function of :mod:`.replacement` (RoPE and
learned absolute models) and BLOOM's replaced ``baddbmm``
(:mod:`..alibi.logits`) both take their rows and changes from here.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from posgen.harness.additive_fit.causal_layout import CausalLayout
from posgen.harness.additive_fit.logit_fit import FitOptions, LayoutCache, fit_sums, head_sums
from posgen.harness.model_side.logits.forms import (
    SHUFFLE_STREAM,
    LogitDonor,
    LogitForm,
    logit_change,
)
from posgen.perturbations.seeding import standard_normal, stream_seed


@dataclass
class LogitReplacement:
    """What ``logits=`` replaces in one forward (or several): the form, where it applies,
    the batch plan's rows, and the fit's layouts and options (module doc)."""

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

    def row_change(self, layer, row, w, fitted_layout, heads_of, out=None) -> torch.Tensor:
        """W' − W [P, m, m] float32 of batch row ``row``'s logits ``w`` [P, m, m] float32 in
        ``layer``: the form's logits from the exact fit of w over the row's fitted entries
        (``fitted_layout``: F [m, m] bool and its layout), 0 off F (:func:`.forms.logit_change`);
        ``heads_of``: (the layer's query heads H, the P heads of w); written into ``out``
        (a contiguous [P, m, m] float32) when given."""
        (fitted, layout), (h, heads), m = fitted_layout, heads_of, w.shape[-1]
        fits = fit_sums(head_sums(w, layout, dtype=torch.float32), layout)
        donor = None if self.donor is None else self.donor.distance_term(layer, heads, m)
        keys = _shuffle_keys(self, layer, row, h, m, w.device, heads)
        return logit_change(self.form, w, fits, fitted, donor, keys, out=out)

    def replaces_whole_logits(self, query, masks: MaskRows, softcap) -> bool:
        """Whether this call takes the route of the whole logits (of the attention
        function: :mod:`.replacement`)."""
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
