"""What the additive form predicts a position perturbation does to each head's logits.

For one token window of n tokens and a position perturbation with integer position values
π (``build_plan``'s draw for that window: the draw of the sweep's cells), per layer ℓ
one captured forward gives

- W  [H, n, n]: the logits the model computes (q·kᵀ·scaling of its post-RoPE q, k);
- W_π [H, n, n]: the logits layer ℓ computes when only its own positions are π, i.e.
  what ``hf-posgen layers=ℓ`` feeds that layer: the family's ``apply_rotary_pos_emb``
  called again on the same pre-RoPE q and k with the angles of π
  (:func:`posgen.harness.model_side.positions.layers.layer_positions` with ``split_heads``).
  The forward itself runs plainly, so every layer's input is the plain one.

The measured change is ΔW = W_π − W. The exact fit of W over its fitted entries F,
W ≈ a[i−j] + b[i] + c[j] (:mod:`posgen.harness.additive_fit.logit_fit`), predicts

    ΔŴ[i, j] = a[π_i − π_j] − a[i − j]          (b and c stay with the tokens, which do not move)

on the *covered* entries: F with 0 ≤ π_i − π_j and a[π_i − π_j] fitted. A key moved after
its query (π_j > π_i) has a distance no causal fit has seen: the form predicts nothing
there, and the share of F covered is reported. Per head, over the changed entries
E = {covered, π_i − π_j ≠ i − j} (elsewhere both sides are 0 up to rounding):

    r      = Pearson r(ΔŴ, ΔW) over E
    share  = 1 − Σ_E (ΔW − ΔŴ)² / Σ_E ΔW²            (the share of ‖ΔW‖² explained)

and per query row i, with P the softmax over the row's covered entries of W_π
(measured), of W + ΔŴ (predicted) and of W (plain), the mean over rows of
KL(P_meas ‖ P_pred), KL(P_meas ‖ P_plain) (the change a "no change" prediction misses)
and KL(P_pred ‖ P_plain) (the change the form predicts: the per-layer predictor of
sensitivity). The raw sums are returned too, so that heads, layers and windows pool.

The fit's normalisation (c without a linear trend in j) attributes a linear trend to the
distance term; a content term that happens to trend with j is then partly predicted to
move.

Two ways to the same figures. A causal layer without soft-capping (the usual case) takes
the strips (:func:`strip_change_figures`): ΔW and ΔŴ are 0 off the changed entries, which
lie in the rows and columns of the moved tokens, so W and W_π are computed there only
(two [H, k, n] strips for k moved tokens); each row's normaliser over its unchanged
covered entries U comes from torch's fused attention kernel with U as its mask
(:func:`posgen.harness.model_side.attention.lambda_attention.local_attention`, which returns the
log-sum-exp); the fit's distance term comes from q and k
(:func:`posgen.harness.additive_fit.qk_sums.grouped_fit_sums`). With
LSE_x = logaddexp(LSE_U, log Σ_{E_i} e^x), KL(P_x ‖ P_y) = Σ_{E_i} P_x (x − y) − LSE_x +
LSE_y. Any other layer takes the dense maps (:func:`change_figures`): float32 [H, n, n],
a few at once. The two agree to float rounding (tested); the strips treat ΔW on unchanged
entries as exactly 0, where the dense maps carry the rounding of W_π.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from posgen.harness.additive_fit.causal_layout import CausalLayout
from posgen.harness.additive_fit.logit_fit import (
    FitOptions,
    LayoutCache,
    fit_sums,
    fit_terms,
    head_sums,
)
from posgen.harness.additive_fit.qk_sums import grouped_fit_sums
from posgen.harness.model_family import family_of
from posgen.harness.model_side.alibi.capture import alibi_capture_forward
from posgen.harness.model_side.attention.lambda_attention import local_attention
from posgen.harness.model_side.logits.capture import capture_forward
from posgen.harness.model_side.logits.replacement import grouped_like_repeat_kv
from posgen.harness.model_side.logits.rows import fit_layout
from posgen.harness.model_side.positions.layers import TWIN_ROTATIONS, layer_count, layer_positions
from posgen.harness.model_side.positions.plan import build_plan
from posgen.harness.position_family import position_family_of
from posgen.results.scores.cause import KLS, SUMS, r_and_share


def perturbed_positions(ids: Sequence[int], scheme: Any, seed: int) -> torch.Tensor | None:
    """The scheme's position values [n] for the window ``ids`` (all of it perturbed, as a
    rolling window is): the plan ``hf-posgen`` makes for that row. None for an identity
    draw. Raises for non-integer positions (the fit has a[d] at integer d only)."""
    plan = build_plan(torch.tensor([list(ids)]), [len(ids)], (scheme,), seed)
    if plan.positions is None:
        return None
    if plan.positions.dtype.is_floating_point:
        raise ValueError(
            f"{scheme.to_string()}: the additive form predicts integer position moves "
            "(reorderings, shifts); this scheme gives non-integer positions"
        )
    return plan.positions[0]


def change_figures(
    w: torch.Tensor, w_moved: torch.Tensor, a: torch.Tensor, fitted: torch.Tensor, pos: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Per head [P] (module doc): ``entries`` |F|, ``covered``, the sums over the changed
    entries (``changed``, ``sum_pred``, ``sum_meas``, ``sum_pred2``, ``sum_meas2``,
    ``sum_cross``) and the row means of the three ``KLS``. ``w``, ``w_moved`` [P, n, n] float,
    ``a`` [P, n_a] the fit's distance term (NaN where unfitted), ``fitted`` [n, n] bool,
    ``pos`` [n] integer positions π."""
    n = w.shape[-1]
    i = torch.arange(n, device=w.device)
    dist = i[:, None] - i[None, :]
    pos = pos.to(w.device, torch.long)
    moved = pos[:, None] - pos[None, :]
    a32 = a.float()
    inside = fitted & (moved >= 0) & (moved < a.shape[-1])
    pred = a32[:, moved.clamp(0, a.shape[-1] - 1)] - a32[:, dist.clamp(min=0)]
    covered = inside & torch.isfinite(pred)  # [P, n, n]
    pred = torch.where(covered, pred, 0.0)
    meas = torch.where(covered, w_moved.float() - w.float(), 0.0)
    changed = covered & (moved != dist)
    p, m = torch.where(changed, pred, 0.0).double(), torch.where(changed, meas, 0.0).double()
    out = {
        "entries": fitted.sum().expand(w.shape[0]).double(),
        "covered": covered.sum((-1, -2)).double(),
        "changed": changed.sum((-1, -2)).double(),
        "sum_pred": p.sum((-1, -2)),
        "sum_meas": m.sum((-1, -2)),
        "sum_pred2": (p * p).sum((-1, -2)),
        "sum_meas2": (m * m).sum((-1, -2)),
        "sum_cross": (p * m).sum((-1, -2)),
    }
    low = torch.tensor(float("-inf"), device=w.device)
    logp = {
        name: torch.log_softmax(torch.where(covered, x.float(), low), dim=-1)
        for name, x in (("meas", w_moved), ("pred", w.float() + pred), ("plain", w))
    }
    pairs = (("meas", "pred"), ("meas", "plain"), ("pred", "plain"))
    for name, (x, y) in zip(KLS, pairs, strict=True):
        terms = torch.where(covered, logp[x].exp() * (logp[x] - logp[y]), 0.0)
        out[name] = terms.sum(-1).double().mean(-1)  # every row covers its diagonal
    return out


@dataclass
class Strip:
    """One strip of a window: its query rows and key columns (None: all keys), and its
    changed entries E in row-major order: ``flat`` (index into the strip's [r, c] map),
    ``row`` (the entry's row within the strip), ``distance`` i − j and ``moved_distance``
    π_i − π_j (all [|E|] long)."""

    rows: torch.Tensor
    cols: torch.Tensor | None
    flat: torch.Tensor
    row: torch.Tensor
    distance: torch.Tensor
    moved_distance: torch.Tensor


@dataclass
class WindowStrips:
    """What every layer of one (window, π) shares for :func:`strip_change_figures`: the
    strips of the moved tokens R (R's rows against every key; the other rows against R's
    keys), and the additive mask [1, 1, n, n] of the unchanged covered entries U (0 there,
    −inf elsewhere)."""

    strips: tuple[Strip, ...]
    unchanged: torch.Tensor  # [1, 1, n, n] float32
    entries: int
    covered: int

    @classmethod
    def of(cls, pos: torch.Tensor, n: int) -> WindowStrips:
        """The strips of the causal mask of n tokens under positions ``pos`` [n]."""
        i = torch.arange(n, device=pos.device)
        dist, moved_dist = i[:, None] - i[None, :], pos[:, None] - pos[None, :]
        covered = (dist >= 0) & (moved_dist >= 0) & (moved_dist < n)
        changed = covered & (moved_dist != dist)
        moved, kept = (pos != i).nonzero()[:, 0], (pos == i).nonzero()[:, 0]
        unchanged = torch.zeros(n, n, device=pos.device).masked_fill(
            ~(covered & ~changed), -torch.inf
        )
        strips = []
        for rows, cols in ((moved, None), (kept, moved)):
            if rows.numel() == 0 or (cols is not None and cols.numel() == 0):
                continue
            keys = i if cols is None else cols
            row, col = changed[rows][:, keys].nonzero().unbind(-1)  # row-major
            qi, kj = rows[row], keys[col]
            flat = row * len(keys) + col
            strips.append(Strip(rows, cols, flat, row, qi - kj, pos[qi] - pos[kj]))
        return cls(tuple(strips), unchanged[None, None], n * (n + 1) // 2, int(covered.sum()))


def strip_change_figures(
    q: torch.Tensor,
    k: torch.Tensor,
    q_moved: torch.Tensor,
    k_moved: torch.Tensor,
    scaling: float,
    a: torch.Tensor,
    strips: WindowStrips,
) -> dict[str, torch.Tensor]:
    """:func:`change_figures` of a causal layer without soft-capping from its post-RoPE
    ``q``, ``k`` and their twins ``q_moved``, ``k_moved`` [P, n, d] (KV heads expanded),
    by strips (module doc): each strip's logits by one product, then its changed entries
    alone, [P, |E|]."""
    p_heads, n = q.shape[0], q.shape[1]
    lse_u = local_attention(q[None], k[None], q[None], strips.unchanged, scaling)[1][0]
    a32 = a.float()
    out = {name: torch.zeros(p_heads, dtype=torch.float64, device=q.device) for name in SUMS}
    kls = {name: torch.zeros(p_heads, n, device=q.device) for name in KLS}
    for strip in strips.strips:
        keys, keys_moved = (
            (k, k_moved) if strip.cols is None else (k[:, strip.cols], k_moved[:, strip.cols])
        )
        w = _entries(q[:, strip.rows], keys, scaling, strip.flat)
        m = _entries(q_moved[:, strip.rows], keys_moved, scaling, strip.flat).sub_(w)  # ΔW
        p = a32[:, strip.moved_distance].sub_(a32[:, strip.distance])  # ΔŴ
        for name, value in _strip_sums(p, m).items():
            out[name] += value
        for name, value in _strip_kls(w, p, m, lse_u[:, strip.rows], strip.row):
            kls[name][:, strip.rows] = value
    out["entries"] = torch.full_like(out["changed"], strips.entries)
    out["covered"] = torch.full_like(out["changed"], strips.covered)
    out.update({name: v.double().mean(-1) for name, v in kls.items()})
    return out


def _entries(q: torch.Tensor, k: torch.Tensor, scaling: float, flat: torch.Tensor) -> torch.Tensor:
    """[P, |E|] float32: the logits q·kᵀ·scaling of the strip's [P, r, c] map at ``flat``."""
    w = torch.matmul(q.float(), k.float().mT).mul_(scaling)
    return w.flatten(-2).index_select(-1, flat)


def _strip_sums(p: torch.Tensor, m: torch.Tensor) -> dict[str, torch.Tensor]:
    """The sums over E of one strip from ΔŴ ``p`` and ΔW ``m`` [P, |E|], in float64."""
    p, m = p.double(), m.double()
    return {
        "changed": torch.full((p.shape[0],), float(p.shape[-1]), dtype=torch.float64),
        "sum_pred": p.sum(-1),
        "sum_meas": m.sum(-1),
        "sum_pred2": torch.linalg.vecdot(p, p),
        "sum_meas2": torch.linalg.vecdot(m, m),
        "sum_cross": torch.linalg.vecdot(p, m),
    }


def _strip_kls(w: torch.Tensor, p: torch.Tensor, m: torch.Tensor, lse_u: torch.Tensor, row):
    """(name, [P, r]) per ``KLS``: the rows' KLs of one strip from its plain logits ``w``,
    ΔŴ ``p`` and ΔW ``m`` on E ([P, |E|], ``row`` [|E|] each entry's row) and the
    log-sum-exp over each row's unchanged covered entries ``lse_u`` [P, r] (module doc).

    Per x ∈ (measured W + ΔW, predicted W + ΔŴ, plain W): M_x the row's maximum over E,
    e_x = exp(x − M_x), LSE_x = logaddexp(LSE_U, M_x + log Σ e_x), and
    Σ_E P_x (x − y) = e^{M_x − LSE_x} Σ e_x (x − y), where x − y is m − p, m or p."""
    heads, rows = lse_u.shape

    def per_row(values: torch.Tensor) -> torch.Tensor:  # Σ over each row's entries
        return torch.zeros(heads, rows, dtype=values.dtype).index_add_(1, row, values)

    lse, weight = {}, {}
    for name, x in (("meas", w + m), ("pred", w + p), ("plain", w)):
        top = torch.full((heads, rows), -torch.inf).scatter_reduce_(1, row.expand_as(x), x, "amax")
        top = torch.where(torch.isfinite(top), top, 0.0)  # a row without changed entries
        e = (x - top[:, row]).exp_()
        lse[name] = torch.logaddexp(lse_u, top + per_row(e).log())
        weight[name] = (e, torch.exp(top - lse[name]))
    (e_meas, s_meas), (e_pred, s_pred) = weight["meas"], weight["pred"]
    toward_m = per_row(e_meas * m)
    terms = (
        (s_meas * (toward_m - per_row(e_meas * p)), "meas", "pred"),
        (s_meas * toward_m, "meas", "plain"),
        (s_pred * per_row(e_pred * p), "pred", "plain"),
    )
    for name, (term, x, y) in zip(KLS, terms, strict=True):
        yield name, term - lse[x] + lse[y]


def fit_capture(cap, layouts: LayoutCache, options: FitOptions) -> tuple[torch.Tensor, Any]:
    """(F [n, n] bool, HeadFits) of every head of one captured layer (batch 1): the fit of
    its logits over the entries it attends, as ``logits=`` fits them."""
    fitted = options.apply(cap.attended[0, 0])
    layout = fit_layout(layouts, fitted, options)
    return fitted, fit_sums(head_sums(cap.logits[0], layout, dtype=torch.float32), layout)


def distance_terms(model: torch.nn.Module, ids: Sequence[int]) -> dict[int, torch.Tensor]:
    """Per layer, the distance term a [H, n] (float64, NaN where unfitted) of the fit of
    every head's logits on one plain forward of ``ids``: a ``logits=foreign`` donor. An
    ALiBi model's logits are its full ones, bias included (what ``logits=`` fits there)."""

    layouts, options, terms = LayoutCache(), FitOptions(), {}

    def keep(cap) -> None:
        terms[cap.layer] = fit_capture(cap, layouts, options)[1].a.cpu()

    alibi = position_family_of(model).kind == "alibi"
    (alibi_capture_forward if alibi else capture_forward)(model, list(ids), keep)
    return terms


class ChangePredictor:
    """Consumer of ``LayerCapture``s inside :func:`layer_positions` (``split_heads``):
    per layer, the figures of :func:`change_figures` against the twin rotation."""

    def __init__(
        self, positions: torch.Tensor, layouts: LayoutCache | None = None, dense: bool = False
    ) -> None:
        """``dense``: every layer by the dense maps (the strips' reference, for tests)."""
        self.positions = positions
        self.layouts = layouts or LayoutCache()
        self.options = FitOptions()
        self.dense = dense
        self.rows: list[dict[str, Any]] = []
        self._strips: WindowStrips | None = None

    def __call__(self, cap) -> None:
        if cap.query.shape[0] != 1:
            raise ValueError("the prediction takes one window per forward (batch size 1)")
        twins = TWIN_ROTATIONS.get()
        moved = None if twins is None else twins.pop(cap.layer, None)
        if moved is None:
            raise RuntimeError(f"layer {cap.layer}: no perturbed rotation was recorded")
        query, key = moved
        heads, n = cap.query.shape[1], cap.query.shape[2]
        key = family_of(cap.module).expand_kv(cap.module, key, heads)
        layout = None
        if not self.dense and cap.softcap is None and cap.causal and cap.window is None:
            layout = self.layouts.causal(n, self.options, cap.query.device)
        if isinstance(layout, CausalLayout):  # the strips (module doc)
            q, k = cap.query[0], cap.key[0]
            grouped = cap.kv_heads and grouped_like_repeat_kv(cap.module, cap.kv_heads, heads)
            kv = k[:: heads // cap.kv_heads] if grouped else k  # each key head once
            a = fit_terms(*grouped_fit_sums(q, kv, layout, cap.scaling), layout)[0]
            if self._strips is None:
                self._strips = WindowStrips.of(self.positions.to(q.device), n)
            figures = strip_change_figures(q, k, query[0], key[0], cap.scaling, a, self._strips)
        else:
            fitted, fits = fit_capture(cap, self.layouts, self.options)
            w_moved = dataclasses.replace(cap, query=query, key=key, _logits=None).logits[0]
            figures = change_figures(cap.logits[0], w_moved, fits.a, fitted, self.positions)
        self.rows.extend(head_rows(figures, cap.layer, n))


def head_rows(figures: dict[str, torch.Tensor], layer: int, n: int) -> list[dict[str, Any]]:
    """One row per head of :func:`change_figures`' output ([P] each): ``layer``, ``head``,
    ``n``, the figures, ``r`` and ``share``."""
    values = {k: v.cpu().tolist() for k, v in figures.items()}
    rows = []
    for head in range(len(values["entries"])):
        row = {"layer": layer, "head": head, "n": n}
        row.update({k: v[head] for k, v in values.items()})
        row.update(r_and_share(row))
        rows.append(row)
    return rows


def rotary_window_rows(
    model: torch.nn.Module, ids: Sequence[int], pos: torch.Tensor, layouts: LayoutCache
) -> list[dict[str, Any]]:
    """The rows of one window under positions ``pos`` [n] on a rotary model: one captured
    forward, every layer's twin rotation at π (module doc)."""

    predictor = ChangePredictor(pos, layouts)
    with layer_positions(model, pos[None], list(range(layer_count(model))), split_heads=True):
        capture_forward(model, list(ids), predictor)
    return predictor.rows


def predict_windows(
    model: torch.nn.Module,
    windows: Sequence[Sequence[int]],
    schemes: Sequence[Any],
    seed: int,
    progress: bool = False,
    window_rows: Any = rotary_window_rows,
) -> list[dict[str, Any]]:
    """One row per (window, scheme, layer, head): ``doc`` (the window's index), ``scheme``,
    ``layer``, ``head``, ``n`` and the figures of :func:`change_figures` with ``r`` and
    ``share`` (:func:`posgen.results.scores.cause.r_and_share`). One captured forward per
    (window, scheme), by ``window_rows(model, ids, pos, layouts)`` (an ALiBi model:
    :func:`.alibi_change.alibi_window_rows`); identity draws are skipped."""
    from tqdm.auto import tqdm

    layouts, rows = LayoutCache(), []
    jobs = [(doc, ids, s) for doc, ids in enumerate(windows) for s in schemes]
    for doc, ids, scheme in tqdm(jobs, desc="predicted change", disable=not progress):
        pos = perturbed_positions(ids, scheme, seed)
        if pos is None:
            continue
        key = {"doc": doc, "scheme": scheme.to_string()}
        rows.extend({**key, **row} for row in window_rows(model, ids, pos, layouts))
    return rows
