"""Exact least-squares fit of attention logits: W[i, j] ≈ a[i−j] + b[i] + c[j].

For one head, W is the [n, n] matrix of pre-softmax logits (query i, key j). The fit uses
the *fitted entries* F ⊆ {(i, j): j ≤ i}: the entries the layer attends to (causal, or a
sliding window), optionally without the diagonal, optionally without the first k key
positions (attention sinks). Defaults: diagonal included, no sink keys excluded
(``FitOptions()``); a sink column is absorbed whole by its own c[j] anyway.

Three-axis model (distance, query, key), θ = (a, b, c) ∈ R^{3n}::

    W[i, j] ≈ a[i−j] + b[i] + c[j],   (i, j) ∈ F                        (ordinary least squares)

Two-axis model: W[i, j] ≈ a[i−j] + c[j].

Normal equations G θ = s, with s = (diagonal sums, row sums, column sums) of W over F, and
the Gram matrix G = XᵀX depending only on F (so only on n, the mask and the options)::

        ⎡ diag(n_d)  C_db       C_dc      ⎤     n_d = #{(i, j) ∈ F: i−j = d}
    G = ⎢ C_dbᵀ      diag(n_i)  M         ⎥     C_db[d, i] = 1[(i, i−d) ∈ F]
        ⎣ C_dcᵀ      Mᵀ         diag(n_j) ⎦     C_dc[d, j] = 1[(j+d, j) ∈ F],  M = 1[F]

G is singular. Its null space holds the two additive constants (a += α, b −= α and
a += β, c −= β), the linear trend (a[d] += g·d, b[i] −= g·i, c[j] += g·j, because
(i−j) − i + j = 0), and every parameter no fitted entry touches (e.g. c[j] for sink
keys). The fitted values X θ are unique; posgen solves G θ = s by eliminating the
diagonal distance block: with C = (C_db | C_dc) and B the (row, column) block,

    θ_x = S⁻ (s_x − Cᵀ diag(1/n_d) s_d),   θ_d = diag(1/n_d) (s_d − C θ_x),
    S = B − Cᵀ diag(1/n_d) C   ((2n)×(2n) for three axes, n×n for two),

where S⁻ is a generalised inverse of the Schur complement from a pivoted Cholesky
factorisation, computed once per layout in float64 and reused for every head, layer and
document (s = Xᵀw is always in the range of G, so this θ solves the normal equations, and
any solution gives the same fitted values), and rank(G) = #{d: n_d > 0} + rank(S). Then a
normalisation is stated for per-term values: c has zero weighted mean and zero weighted
linear trend in j (a linear trend is attributed to distance), b has zero weighted mean,
a carries the constant (weights = entry counts of each diagonal, row or column). A mask
with extra degeneracies beyond these (rare: e.g. a distance seen by a single entry next to
excluded sinks) leaves per-term values one basic solution; fitted values and every r stay
exact.

For the causal mask (with or without sink keys and the diagonal) the same normal equations
are solved from their structure instead, with no n × n matrix:
:mod:`posgen.harness.additive_fit.causal_layout` (prefix-sum products with G, conjugate
gradients); ``LayoutCache.causal`` picks it. Both layouts offer ``solve``.

Everything per head is O(n²) sums (``head_sums``: the only pass over the logits; see
``block_sums`` and ``qk_sums`` for the ways ``posgen decompose`` gets them without holding
the logits) plus the solve (``fit_sums``: shared by all heads, batched over any number of
heads, e.g. all layers of a forward), because for OLS with an intercept in the column
space:

    r² = ESS / TSS,  ESS = θᵀ s_c,  TSS = Σ_F (W − W̄)²,  RSS = TSS − ESS
    r_row_centred² = 1 − RSS / Σ_F (W[i, j] − W̄[i, ·])²   (row indicators are in X, so the
                     residual has zero row means and row-centring leaves it unchanged)

Chance level: for pure noise E[r²] ≈ (rank(G) − 1) / (|F| − 1), reported as its square root.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import NamedTuple, Protocol

import torch

from posgen.harness.additive_fit.fit_layout import (  # re-exported: the fit's public API
    FitLayout,
    FitOptions,
    LayoutCache,
    diagonal_sums,
    padded_diagonal_sums,
)

__all__ = [
    "FitLayout",
    "FitOptions",
    "HeadFits",
    "HeadSums",
    "LayoutCache",
    "RawSums",
    "centred_sums",
    "diagonal_and_column_sums",
    "diagonal_sums",
    "fit_heads",
    "fit_sums",
    "fit_terms",
    "fitted_map",
    "head_sums",
]


@dataclass
class HeadSums:
    """Centred sums of P heads' logits over F (float64): everything the fits need."""

    mean: torch.Tensor  # [P], W̄ over F
    diag: torch.Tensor  # [P, n], Σ_F (W − W̄) along each distance d
    rows: torch.Tensor  # [P, n], Σ_F (W − W̄) along each query row i
    cols: torch.Tensor  # [P, n], Σ_F (W − W̄) along each key column j
    tss: torch.Tensor  # [P], Σ_F (W − W̄)²
    tss_row_centred: torch.Tensor  # [P], Σ_F (W[i, j] − W̄[i, ·])²

    @classmethod
    def cat(cls, parts: list[HeadSums]) -> HeadSums:
        """The heads of several ``HeadSums`` of one layout, in order (e.g. several layers)."""
        return cls(*(torch.cat([getattr(p, f.name) for p in parts]) for f in fields(cls)))


class RawSums(NamedTuple):
    """Sums over the fitted entries of some query rows of W − shift (float64): diagonal,
    row and column [P, n], squares [P]."""

    diag: torch.Tensor
    rows: torch.Tensor
    cols: torch.Tensor
    sumsq: torch.Tensor

    def __add__(self, other: RawSums) -> RawSums:  # type: ignore[override]
        return RawSums(*(x + y for x, y in zip(self, other, strict=True)))

    def __sub__(self, other: RawSums) -> RawSums:
        return RawSums(*(x - y for x, y in zip(self, other, strict=True)))


def head_sums(
    logits: torch.Tensor,
    layout: FitLayout,
    chunk: int | None = None,
    dtype: torch.dtype = torch.float64,
) -> HeadSums:
    """Sums of ``logits`` [P, n, n] over the layout's entries, O(P n²); results in float64.

    The O(n²) reductions run in ``dtype`` on W minus a rough per-head mean, so that a large
    common offset cancels no digits. float64 (default) is exact to ~1e-12 in r and ~1e-12
    in fitted values. float32 (what ``posgen decompose`` streams with) costs about half as
    much; with torch's cascaded summation r stays within ~1e-7 of float64 (2.8e-8 over all
    SmolLM2-135M heads at n = 512, printed by benchmarks/bench_logit_fit.py; the tests hold
    it to 1e-6 against lsqr), fitted values within ~1e-6 relative. Heads are processed
    ``chunk`` at a time (default: all at once; the one buffer then holds one copy of the
    input in ``dtype``, and fewer, larger reductions are faster on CPU).
    """
    p, n = logits.shape[0], layout.n
    if logits.shape[-2:] != (n, n):
        raise ValueError(f"logits are {tuple(logits.shape)}, the layout is for n={n}")
    chunk = chunk or p
    # summing W − shift (a value representable in ``dtype``) keeps float32 sums exact enough
    shift = _rough_mean(logits, layout).to(dtype).double()

    def fill(out: torch.Tensor, heads: slice) -> None:
        torch.sub(logits[heads], shift[heads].to(dtype)[:, None, None], out=out)
        out.mul_(layout.mask)

    parts = [_raw_sums(fill, _heads(k, chunk, p), layout, dtype) for k in range(0, p, chunk)]
    diag, rows, cols, sumsq = (torch.cat(t) for t in zip(*parts, strict=True))
    return centred_sums(diag, rows, cols, sumsq, shift, layout)


def centred_sums(diag, rows, cols, sumsq, shift, layout) -> HeadSums:
    """``HeadSums`` from the raw sums of W − shift over F: diagonal, row, column [P, n] and
    squares [P] (float64), ``shift`` [P] the per-head value subtracted before summing."""
    n_e = layout.n_entries
    mean = rows.sum(-1) / n_e  # of W − shift: the centred sums below do not depend on shift
    used_i = layout.count_i > 0
    row_sq = torch.where(used_i, rows**2 / layout.count_i.clamp(min=1), 0.0).sum(-1)
    return HeadSums(
        mean=mean + shift,
        diag=diag - mean[:, None] * layout.count_d,
        rows=rows - mean[:, None] * layout.count_i,
        cols=cols - mean[:, None] * layout.count_j,
        tss=sumsq - n_e * mean**2,
        tss_row_centred=sumsq - row_sq,
    )


def diagonal_and_column_sums(
    x: torch.Tensor | MapSource,
    layout: FitLayout,
    dtype: torch.dtype = torch.float32,
    chunk: int | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Raw (uncentred) sums of ``x`` [P, n, n] over F along each distance and key column.

    ``x`` may also be a ``MapSource`` (e.g. ``qk_pattern.DistanceMap``) that writes its
    values for a slice of heads straight into the summing buffer, ``chunk`` heads at a time
    (default all). Results [P, n] float64; the reductions run in ``dtype``.
    """
    p = x.shape[0]
    chunk = chunk or p
    if isinstance(x, torch.Tensor):

        def fill(out: torch.Tensor, heads: slice) -> None:
            torch.mul(x[heads], layout.mask, out=out)

    else:

        def fill(out: torch.Tensor, heads: slice) -> None:
            x.fill(out, heads)
            out.mul_(layout.mask)

    parts = [
        _raw_sums(fill, _heads(k, chunk, p), layout, dtype, rows_and_squares=False)
        for k in range(0, p, chunk)
    ]
    diag, cols = (torch.cat(t) for t in zip(*parts, strict=True))
    return diag, cols


class MapSource(Protocol):
    """A [P, n, n] map computed on demand, a slice of heads at a time."""

    shape: tuple[int, int, int]

    def fill(self, out: torch.Tensor, heads: slice) -> None:
        """Write the values of ``heads`` into ``out`` [len(heads), n, n] (any strides)."""


def _rough_mean(logits: torch.Tensor, layout: FitLayout, rows: int = 16) -> torch.Tensor:
    """[P] float64 mean of ``logits`` over the fitted entries of about ``rows`` query rows.

    O(P n · rows). Subtracted before the O(n²) sums, it keeps a large common offset
    (|W̄| ≫ std W) from cancelling digits in TSS = Σ W² − |F| W̄² in float32.
    """
    key = ("sample_rows", rows)
    if key not in layout.extra:  # depends on the layout only: once, not per layer
        used = torch.nonzero(layout.count_i > 0)[:, 0]
        spots = torch.linspace(0, len(used) - 1, min(rows, len(used)), device=used.device)
        pick = used[spots.round().long()]
        layout.extra[key] = (pick, layout.mask[pick])  # rows, their [rows, n] mask
    pick, sub_mask = layout.extra[key]
    sub = torch.where(sub_mask, logits[:, pick].double(), 0.0)
    return sub.sum((-1, -2)) / sub_mask.sum()


def _heads(start: int, chunk: int, p: int) -> slice:
    return slice(start, min(start + chunk, p))


def _raw_sums(
    fill: Callable[[torch.Tensor, slice], None],
    heads: slice,
    layout: FitLayout,
    dtype: torch.dtype,
    rows_and_squares: bool = True,
):
    """Diagonal, row and column sums and the sum of squares over F of the values that
    ``fill(out, heads)`` writes (zero outside F) for the heads ``heads`` (a bounded slice).

    One buffer: the values go into rows led by n zeros, so the diagonal sums read it
    through a strided view. Without ``rows_and_squares``: (diagonal, column) sums only.
    """
    n, count = layout.n, heads.stop - heads.start
    buf = layout.workspace(count, dtype)
    buf[:, :n].zero_()
    x = buf[:, n:].view(count, n, n)
    fill(x, heads)
    f64 = torch.float64
    diag, cols = padded_diagonal_sums(buf, n).to(f64), x.sum(-2).to(f64)
    if not rows_and_squares:
        return diag, cols
    rows = x.sum(-1).to(f64)
    sumsq = (torch.linalg.vector_norm(x, dim=-1).double() ** 2).sum(-1)
    return diag, rows, cols, sumsq


@dataclass
class HeadFits:
    """Fit of P heads. Per-term values follow the module's normalisation; NaN = unused."""

    r_3axis: torch.Tensor  # [P] Pearson r of fitted vs actual, three-axis model
    r_2axis: torch.Tensor  # [P] same, a[i−j] + c[j]
    r_row_centred: torch.Tensor  # [P] both sides minus each query row's mean
    residual_std: torch.Tensor  # [P] root mean square residual of the three-axis fit
    logit_std: torch.Tensor  # [P] standard deviation of W over F (a collapsed head is ~0)
    share_distance: torch.Tensor  # [P] var(a[i−j]) / (var a + var b + var c) over F
    share_query: torch.Tensor  # [P]
    share_key: torch.Tensor  # [P]
    a: torch.Tensor  # [P, n] distance term (carries the constant W̄)
    b: torch.Tensor  # [P, n] query term
    c: torch.Tensor  # [P, n] key term
    chance_r: float
    chance_r_2axis: float
    n_entries: int

    @property
    def r2(self) -> torch.Tensor:
        return self.r_3axis**2


def fit_heads(logits: torch.Tensor, layout: FitLayout, sums: HeadSums | None = None) -> HeadFits:
    """Fit W ≈ a[i−j] + b[i] + c[j] and W ≈ a[i−j] + c[j] for ``logits`` [P, n, n] at once."""
    return fit_sums(sums if sums is not None else head_sums(logits, layout), layout)


def fit_sums(s: HeadSums, layout: FitLayout) -> HeadFits:
    """The fits from the heads' sums alone: O(P n) per head beside a few [P, 2n] × [2n, 2n]
    products, so heads of several layers (``HeadSums.cat``) are best solved in one call."""
    theta, ess = layout.solve(s.diag, torch.cat([s.rows, s.cols], dim=-1))
    ess2 = layout.solve(s.diag, s.cols, two_axis=True)[1]
    tss = s.tss
    rss = (tss - ess).clamp(min=0.0)
    r3 = (ess / tss).clamp(0.0, 1.0).sqrt()
    r2ax = (ess2 / tss).clamp(0.0, 1.0).sqrt()
    r_rc = (1.0 - rss / s.tss_row_centred).clamp(0.0, 1.0).sqrt()
    a, b, c, shares = _normalise(theta, s.mean, layout)
    return HeadFits(
        r_3axis=r3,
        r_2axis=r2ax,
        r_row_centred=r_rc,
        residual_std=(rss / layout.n_entries).sqrt(),
        logit_std=(tss.clamp(min=0.0) / layout.n_entries).sqrt(),
        share_distance=shares[0],
        share_query=shares[1],
        share_key=shares[2],
        a=a,
        b=b,
        c=c,
        chance_r=layout.chance_r,
        chance_r_2axis=layout.chance_r_2axis,
        n_entries=layout.n_entries,
    )


def fit_terms(
    diag: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor, layout: FitLayout
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(a, b, c) [P, n] float64 of the three-axis fit from the raw (uncentred) diagonal, row
    and column sums [P, n] of W over F alone: one solve, no sums of squares (so no r), the
    module's normalisation, NaN on unused parameters. What a replacement by the fit needs."""
    mean = rows.sum(-1) / layout.n_entries
    centred = [x - mean[:, None] * w for x, w in ((diag, layout.count_d), (rows, layout.count_i))]
    cols = cols - mean[:, None] * layout.count_j
    theta, _ = layout.solve(centred[0], torch.cat([centred[1], cols], dim=-1))
    a, b, c, _ = _normalise(theta, mean, layout)
    return a, b, c


def _weighted_mean(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    return (x * w).sum(-1) / w.sum()


def _normalise(theta: torch.Tensor, mean: torch.Tensor, layout: FitLayout):
    """Per-term values: c without weighted mean or linear trend, b without mean, a the rest."""
    n = layout.n
    a, b, c = theta[:, :n], theta[:, n : 2 * n], theta[:, 2 * n :]
    pos = torch.arange(n, dtype=torch.float64, device=theta.device)
    wj = layout.count_j
    jc = pos - _weighted_mean(pos, wj)
    var_j = _weighted_mean(jc**2, wj)
    g = _weighted_mean(c * jc, wj) / var_j if var_j > 0 else torch.zeros_like(mean)
    g = g[:, None]
    a, b, c = a - g * pos, b + g * pos, c - g * pos  # the null-space trend
    cm = _weighted_mean(c, wj)[:, None]
    bm = _weighted_mean(b, layout.count_i)[:, None]
    a, b, c = a + cm + bm + mean[:, None], b - bm, c - cm
    var = [
        _weighted_mean(t**2, w) - _weighted_mean(t, w) ** 2
        for t, w in ((a, layout.count_d), (b, layout.count_i), (c, wj))
    ]
    total = var[0] + var[1] + var[2]
    shares = [v / total for v in var]
    nan = torch.tensor(float("nan"), dtype=theta.dtype, device=theta.device)
    a, b, c = (
        torch.where(w > 0, t, nan) for t, w in ((a, layout.count_d), (b, layout.count_i), (c, wj))
    )
    return a, b, c, shares


def fitted_map(fits: HeadFits, head: int, layout: FitLayout) -> torch.Tensor:
    """a[i−j] + b[i] + c[j] of one head as [n, n] float64, NaN outside the fitted entries."""
    n = layout.n
    i = torch.arange(n, device=fits.a.device)
    dist = (i[:, None] - i[None, :]).clamp(min=0)
    out = fits.a[head][dist] + fits.b[head][:, None] + fits.c[head][None, :]
    return torch.where(layout.mask.to(out.device), out, float("nan"))
