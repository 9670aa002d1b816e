"""The streaming fit: each layer's captured logits reduced to O(heads × n) sums during the
forward, all layers solved in one batched product after it.

``LayerFitter`` is a consumer for :func:`posgen.harness.model_side.logits.capture.capture_attention`.
For every layer it accumulates the sufficient statistics of the exact fit and of the
distance + key form without holding the layer's ``[H, n, n]`` logits: a causal layer
without soft-capping from its queries and keys alone
(:mod:`posgen.harness.additive_fit.qk_sums`), any other a block of query rows at a time
(:mod:`posgen.harness.decomposition.block_sums`). A causal layer, or under Λ attention the
band 0 ≤ i − j < W of a causal layer (``LayerCapture.window``), is solved with the
structured layout (:mod:`posgen.harness.additive_fit.causal_layout`), any other mask with
the dense one. :meth:`LayerFitter.finish` solves every layer that shares a layout at once
and appends one tidy row per (document, layer, head). Its ``fit_mask`` column says which
entries were fitted: ``causal``; ``lambda-band:W``, Λ's local band (keys at their true
distance i − j < W; the G global keys, which Λ scores at the fixed distance W, are left
out); ``infllm-local:W``, InfLLM's local window of the same shape (its memory left out);
or ``model-mask``, the layer's own narrower mask (e.g. a sliding window).
"""

from __future__ import annotations

from typing import Any, NamedTuple

from posgen.harness.additive_fit.causal_layout import CausalLayout, one_thread
from posgen.harness.additive_fit.logit_fit import HeadSums, RawSums, centred_sums, fit_sums
from posgen.harness.additive_fit.qk_sums import layer_qk_sums
from posgen.harness.decomposition.block_sums import (
    split_head_sums,
    streamed_diagonal_and_column_sums,
)
from posgen.harness.decomposition.past_context import COLUMNS as PAST_COLUMNS
from posgen.harness.decomposition.past_context import past_context_figures
from posgen.harness.decomposition.qk_pattern import DistanceMap, distance_key_r


class _LayerSums(NamedTuple):
    """What ``LayerFitter`` keeps of one layer until ``finish()``: O(P n), not the logits."""

    layer: int
    layout: Any  # logit_fit.FitLayout
    sums: Any  # logit_fit.HeadSums of W
    d_sums: tuple  # (diagonal, column) sums of the distance map D
    restricted: bool  # the layer attends to fewer entries than causal (e.g. sliding window)
    split: tuple | None = None  # (shift, rows < C, rows ≥ C raw sums) with a context C
    fit_mask: str = "causal"  # causal, lambda-band:W or model-mask (module doc)


class LayerFitter:
    """Consumer of ``LayerCapture``s. During the forward it reduces each layer's logits to
    their O(P n) sums (``head_sums``, ``distance_sums``) and lets the logits go; ``finish()``
    after the forward solves all layers that share a layout in one batched product and
    appends the tidy rows of document ``doc``."""

    def __init__(self, options, layouts, context: int | None = None) -> None:
        """``context``: the trained context C; with n > C on a causal layer each head also
        gets the ``past_context`` figures (r before / past C, a[d]'s trend), else NaN."""
        self.options, self.layouts, self.context = options, layouts, context
        self.rows: list[dict[str, Any]] = []
        self.doc = 0
        self._pending: list[_LayerSums] = []
        self._last: tuple | None = None  # (attended tensor, layout, restricted)

    def __call__(self, cap) -> None:

        if cap.query.shape[0] != 1:
            raise ValueError("decompose fits one document per forward (batch size 1)")
        layout, window, fit_mask = self._layout(cap)
        split = self.context if isinstance(layout, CausalLayout) else None
        qk_only = getattr(cap, "qk_only", True)  # False: an ALiBi layer's full logits
        if isinstance(layout, CausalLayout) and cap.softcap is None and qk_only:
            sums, d_sums, split_sums = _bilinear_sums(cap, layout, split)
        else:
            sums, d_sums, split_sums = _block_sums(cap, layout, split)
        self._pending.append(
            _LayerSums(cap.layer, layout, sums, d_sums, window, split_sums, fit_mask)
        )

    def _layout(self, cap):
        """(layout, restricted, fit_mask) for the entries ``cap`` attends (under Λ its band
        of width ``cap.window``); layers sharing one mask share the work. A layer the
        model's own mask says is causal (``cap.causal``) gets the structured layout without
        an n × n mask ever being built."""
        import torch

        band = cap.window
        if cap.causal:
            return self._causal_layout(cap.key.shape[-2], band, cap.query.device, cap.band_label)
        attended_bhnn = cap.attended
        if self._last is not None and self._last[0] is attended_bhnn:
            return self._last[1:]
        attended = attended_bhnn[0, 0]
        n = attended.shape[-1]
        if is_causal(attended, band):  # the structured layout: no n × n work or memory
            layout, window, fit_mask = self._causal_layout(n, band, attended.device, cap.band_label)
        else:
            layout = self.layouts.get(self.options.apply(attended), attended.device)
            window = bool((~attended & torch.ones_like(attended).tril()).any())  # e.g. sliding
            fit_mask = "model-mask" if window else "causal"
        self._last = (attended_bhnn, layout, window, fit_mask)
        return layout, window, fit_mask

    def _causal_layout(self, n: int, band: int | None, device, label: str = "lambda-band"):
        """(layout, restricted, fit_mask) of the causal mask of n keys, or its band
        (``label:W``: ``lambda-band`` under Λ, ``infllm-local`` under InfLLM)."""
        layout = self.layouts.causal(n, self.options, device, window=band)
        window = band is not None and band < n
        return layout, window, f"{label}:{band}" if window else "causal"

    def finish(self) -> None:
        """Fit the layers captured since the last ``finish`` and append their rows."""
        import torch

        pending, self._pending, self._last = self._pending, [], None
        groups: dict[int, list[_LayerSums]] = {}
        for item in pending:
            groups.setdefault(id(item.layout), []).append(item)
        by_layer = {}
        for items in groups.values():
            layout = items[0].layout
            sums = HeadSums.cat([it.sums for it in items])
            d_sums = tuple(torch.cat([it.d_sums[k] for it in items]) for k in (0, 1))
            fits = fit_sums(sums, layout)
            values = self._values(fits, distance_key_r(sums, d_sums, layout))
            values.update(self._past_context(items, fits, layout))
            start = 0
            for it in items:
                heads = it.sums.mean.shape[0]
                by_layer[it.layer] = self._rows(
                    it.layer,
                    {k: v[start : start + heads] for k, v in values.items()},
                    fits,
                    it.restricted,
                    it.fit_mask,
                )
                start += heads
        for layer in sorted(by_layer):
            self.rows.extend(by_layer[layer])

    def _past_context(self, items, fits, layout) -> dict[str, list[float]]:
        """The ``past_context`` columns of the heads of ``items`` (NaN without a split)."""
        import torch

        heads = fits.r_3axis.shape[0]
        if self.context is None:
            return {}
        if any(it.split is None for it in items):  # n ≤ C, or not a causal layer
            return {k: [float("nan")] * heads for k in PAST_COLUMNS}
        shift = torch.cat([it.split[0] for it in items])
        before, past = (
            RawSums(*(torch.cat([it.split[part][f] for it in items]) for f in range(4)))
            for part in (1, 2)
        )
        figures = past_context_figures(fits, shift, before, past, layout, self.context)
        return {k: v.double().cpu().tolist() for k, v in figures.items()}

    @staticmethod
    def _values(fits, r_dk) -> dict[str, list[float]]:
        cols = {
            "r_3axis": fits.r_3axis,
            "r_2axis": fits.r_2axis,
            "r_distance_key": r_dk,
            "r_row_centred": fits.r_row_centred,
            "r2": fits.r2,
            "residual_std": fits.residual_std,
            "logit_std": fits.logit_std,
            "share_distance": fits.share_distance,
            "share_query": fits.share_query,
            "share_key": fits.share_key,
        }
        return {k: v.double().cpu().tolist() for k, v in cols.items()}

    def _rows(self, layer, values, fits, window, fit_mask) -> list[dict[str, Any]]:
        return [
            {
                "doc": self.doc,
                "layer": layer,
                "head": head,
                "n": fits.a.shape[-1],
                "n_entries": fits.n_entries,
                **{k: v[head] for k, v in values.items() if k not in PAST_COLUMNS},
                "chance_r": fits.chance_r,
                "chance_r_2axis": fits.chance_r_2axis,
                "restricted_mask": window,
                "fit_mask": fit_mask,
                **{k: values[k][head] for k in PAST_COLUMNS if k in values},
            }
            for head in range(len(values["r_3axis"]))
        ]


def is_causal(attended, window: int | None = None, block: int = 1024) -> bool:
    """Whether ``attended`` [n, n] bool is exactly the causal mask (j ≤ i), or with
    ``window`` its band 0 ≤ i − j < window, checked in blocks of query rows (O(block × n)
    extra memory)."""
    import torch

    n = attended.shape[-1]
    window = n if window is None else window
    j = torch.arange(n, device=attended.device)[None, :]
    for start in range(0, n, block):
        i = torch.arange(start, min(start + block, n), device=attended.device)[:, None]
        if not torch.equal(attended[start : start + block], (j <= i) & (i - j < window)):
            return False
    return True


def _bilinear_sums(cap, layout, split):
    """(HeadSums, D sums, split sums) of a causal, uncapped layer from its q and k alone
    (:mod:`posgen.harness.additive_fit.qk_sums`): no [n, n] map at all."""
    import torch

    q = cap.query[0]  # [H, n, d]
    shift = torch.zeros(q.shape[0], dtype=torch.float64, device=q.device)
    split = split if split is not None and 0 < split < layout.n else None
    d_keys = _distance_axis(cap, layout).keys
    with one_thread():  # O(n d) tensors: on a loaded CPU, thread hand-offs cost 2-5x
        sums = layer_qk_sums(q, cap.key[0], layout, cap.scaling, split, d_keys)
    total, past = sums.total, sums.past
    split_sums = None if past is None else (shift, total - past, past)
    return centred_sums(*total, shift, layout), sums.distance, split_sums


def _block_sums(cap, layout, split):
    """(HeadSums, D sums, split sums) from the logits a block of query rows at a time
    (:mod:`posgen.harness.decomposition.block_sums`): any mask, soft-capping included."""

    def logits(start: int, stop: int, width: int):  # [H, stop − start, width]
        return cap.logit_block(start, stop, width=width)[0]

    heads = cap.query.shape[1]
    sums, *parts = split_head_sums(logits, heads, layout, split)
    d_map = _distance_axis(cap, layout)
    d_sums = streamed_diagonal_and_column_sums(d_map.block, heads, layout)
    return sums, d_sums, (tuple(parts) if parts[1] is not None else None)


def _distance_axis(cap, layout):
    """D[h, i, j] = s·q_i·R(j)k̄ (``posgen.harness.decomposition.qk_pattern``): k̄ is the mean pre-RoPE key
    of each KV head over the fitted key positions, un-rotated and rotated by the model's own
    RoPE; computed per KV head and matched to its query heads."""

    groups = cap.query.shape[1] // cap.kv_heads
    keys = cap.key[:, ::groups]  # [1, KV, n, d]: the expanded heads repeat each KV head
    key_pre = cap.unrotate(keys)
    used = (layout.count_j > 0).to(key_pre.dtype)
    mean_key = (key_pre * used[:, None]).sum(-2, keepdim=True) / used.sum()
    rotated = cap.rotate(mean_key.expand_as(key_pre).contiguous())[0]  # [KV, n, d]
    rotated = rotated.repeat_interleave(groups, dim=0)
    return DistanceMap(cap.query[0], rotated, cap.scaling)
