"""The fit past the trained context C: r on the rows before C and past it, and how far the
fitted distance term a[d] for d ≥ C follows its trend below C.

One fit over the whole window (W ≈ a[i−j] + b[i] + c[j] on every fitted entry, rows i < n,
n > C), then split by query row. For a region R (rows i < C, or rows i ≥ C) with N_R
entries, the Pearson r between W and the fitted f = a[i−j] + b[i] + c[j] over R is

    r_R = (Σ W f − Σ W Σ f / N_R) / sqrt((Σ W² − (Σ W)² / N_R)(Σ f² − (Σ f)² / N_R)),
    Σ W f = Σ_d a[d] s_d^R + Σ_i b[i] s_i^R + Σ_j c[j] s_j^R

from the region's diagonal, row and column sums of W (accumulated during the capture,
:func:`posgen.harness.decomposition.block_sums.split_head_sums`) and Σ f, Σ f² from
:meth:`~posgen.harness.additive_fit.causal_layout.CausalLayout.row_moments` (O(P n)).

Trend of a[d]: a straight line α + β d fitted to a[d] on d ∈ [C/2, C), weighted by n_d (the
entries per distance); ``a_trend_rms_before`` is the weighted root mean square of a − line
on that range, ``a_trend_rms_past`` on d ∈ [C, n) (logit units). A straight line, because a
is identified only up to a constant and a linear trend in d (the null space of the fit):
both figures are the same for every solution. past ≈ before: a[d] continues its trend
past C; past ≫ before: the distance term leaves it.

In a band (Λ's local branch, :class:`~posgen.harness.additive_fit.causal_layout.CausalLayout`
with a window W) only the distances d < W are fitted: ``a_trend_rms_past`` is NaN when
W ≤ C (no fitted distance past C), both trend figures are NaN when fewer than two fitted
distances lie in [C/2, C); the r figures cover the band entries of each row range.
"""

from __future__ import annotations

from posgen.results.tables.decomposition import PAST_COLUMNS as COLUMNS


def past_context_figures(fits, shift, before, past, layout, context: int) -> dict:
    """The four ``COLUMNS`` [P] float64 for heads fitted by ``fits`` on a ``CausalLayout``,
    ``shift`` [P] and ``before``/``past`` the ``RawSums`` of W − shift of rows < C and ≥ C."""
    import torch

    a = torch.nan_to_num(fits.a) - shift[:, None]  # f − shift: the sums are of W − shift
    b, c = torch.nan_to_num(fits.b), torch.nan_to_num(fits.c)
    f_all, f_sq_all, n_all = layout.row_moments(a, b, c, 0)
    f_past, f_sq_past, n_past = layout.row_moments(a, b, c, context)
    moments = {  # rows < C = all rows minus rows ≥ C
        "before": (f_all - f_past, f_sq_all - f_sq_past, n_all - n_past),
        "past": (f_past, f_sq_past, n_past),
    }
    r = {}
    for name, raw in (("before", before), ("past", past)):
        f_sum, f_sq, count = moments[name]
        cross = (a * raw.diag).sum(-1) + (b * raw.rows).sum(-1) + (c * raw.cols).sum(-1)
        w_sum = raw.rows.sum(-1)
        cov = cross - w_sum * f_sum / count
        var_w = raw.sumsq - w_sum**2 / count
        var_f = (f_sq - f_sum**2 / count).clamp(min=0.0)
        r[name] = cov / (var_w * var_f).sqrt()
    before_rms, past_rms = a_trend(torch.nan_to_num(fits.a), layout.count_d, context)
    return dict(zip(COLUMNS, (r["before"], r["past"], before_rms, past_rms), strict=True))


def a_trend(a, count_d, context: int):
    """Weighted rms of a − (α + β d) on d ∈ [C/2, C) (the line's own fit) and on d ∈ [C, n)."""
    import torch

    n = a.shape[-1]
    d = torch.arange(n, dtype=torch.float64, device=a.device)
    below = (d >= context // 2) & (d < context) & (count_d > 0)
    above = (d >= context) & (count_d > 0)
    w = count_d * below
    if int(below.sum()) < 2:  # no line to fit (e.g. a band W ≤ C/2 + 1): NaN
        nan = torch.full(a.shape[:-1], float("nan"), dtype=a.dtype, device=a.device)
        return nan, nan.clone()
    design = torch.stack([torch.ones_like(d), d], dim=1)  # [n, 2]
    gram = design.T @ (w[:, None] * design)  # [2, 2]
    coef = torch.linalg.solve(gram, ((a * w) @ design).T).T  # [P, 2] = (XᵀWX)⁻¹ XᵀW a
    resid = a - coef @ design.T  # [P, n]

    def rms(weights):
        return ((resid**2 * weights).sum(-1) / weights.sum()).sqrt()

    return rms(w), rms(count_d * above)
