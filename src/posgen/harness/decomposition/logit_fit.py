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

Everything per head is O(n²) sums (``head_sums``: the only pass over the logits) plus
O(n²) products with C and S⁻ (``fit_sums``: shared by all heads, batched as matrix
products over any number of heads, e.g. all layers of a forward), because for OLS with an
intercept in the column space:

    r² = ESS / TSS,  ESS = θᵀ s_c,  TSS = Σ_F (W − W̄)²,  RSS = TSS − ESS
    r_row_centred² = 1 − RSS / Σ_F (W[i, j] − W̄[i, ·])²   (row indicators are in X, so the
                     residual has zero row means and row-centring leaves it unchanged)

Chance level: for pure noise E[r²] ≈ (rank(G) − 1) / (|F| − 1), reported as its square root.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass, field, fields
from typing import Protocol

import numpy as np
import torch

_RANK_TOL = 1e-9  # eigenvalues below _RANK_TOL * max eigenvalue count as null


@dataclass(frozen=True)
class FitOptions:
    """Which causal entries enter the fit. Defaults: diagonal included, no sinks excluded."""

    include_diagonal: bool = True
    sink_keys: int = 0  # exclude key positions j < sink_keys

    def __post_init__(self) -> None:
        if self.sink_keys < 0:
            raise ValueError(f"sink_keys must be >= 0, got {self.sink_keys}")

    def apply(self, attended: torch.Tensor) -> torch.Tensor:
        """The fitted entries F: ``attended`` [n, n] bool ∩ causal ∩ the options."""
        n = attended.shape[-1]
        keep = torch.ones(n, n, dtype=torch.bool, device=attended.device).tril(
            0 if self.include_diagonal else -1
        )
        keep[:, : self.sink_keys] = False
        return attended.bool() & keep


def diagonal_sums(x: torch.Tensor) -> torch.Tensor:
    """s[..., d] = Σ_i x[..., i, i−d] for d = 0..n−1; ``x`` [..., n, n] must be lower triangular.

    O(n²), one copy (into the padded buffer of ``_padded_diagonal_sums``).
    """
    n = x.shape[-1]
    flat = torch.nn.functional.pad(x.reshape(-1, n * n), (n, 0)).contiguous()
    return _padded_diagonal_sums(flat, n).reshape(*x.shape[:-2], n)


def _padded_diagonal_sums(flat: torch.Tensor, n: int) -> torch.Tensor:
    """Diagonal sums from ``flat`` [p, n + n²] = (n zeros, lower-triangular x row-major).

    Entry (i, e) with e = n−1−d sits at flat index 1 + i(n+1) + e: a strided view, no copy;
    out-of-range reads land on the zero padding or the (zero) strict upper triangle.
    """
    view = flat.as_strided(
        (flat.shape[0], n, n), (flat.stride(0), n + 1, 1), storage_offset=flat.storage_offset() + 1
    )
    return view.sum(-2).flip(-1)


@dataclass
class FitLayout:
    """What depends only on the fitted entries F [n, n]: counts, the distance cross block,
    generalised inverses of the Schur complements, ranks."""

    mask: torch.Tensor  # [n, n] bool, F
    n_entries: int
    count_d: torch.Tensor  # [n] float64, entries per distance
    count_i: torch.Tensor  # [n] float64, entries per query row
    count_j: torch.Tensor  # [n] float64, entries per key column
    cross: torch.Tensor  # [n, 2n] float64, (C_db | C_dc): distance against (row, column)
    inv_d: torch.Tensor  # [n] float64, 1 / n_d (0 for a distance without entries)
    schur3: torch.Tensor  # [2n, 2n] float64, S⁻ of the three-axis model's (b, c) block
    schur2: torch.Tensor  # [n, n] float64, S⁻ of the two-axis model's c block
    null3: torch.Tensor  # [3n, k3] float64, orthonormal basis of G's null space (3 axes)
    null2: torch.Tensor  # [2n, k2] float64, the same for the two-axis model (a, c)
    rank3: int
    rank2: int
    extra: dict = field(default_factory=dict)

    @property
    def c_dc(self) -> torch.Tensor:
        """[n, n] float64, C_dc[d, j] = 1[(j+d, j) ∈ F]."""
        return self.cross[:, self.n :]

    @property
    def held_bytes(self) -> int:
        """Memory the layout holds (workspaces excluded)."""
        held = (self.mask, self.count_d, self.count_i, self.count_j, self.cross, self.inv_d)
        solve = (self.schur3, self.schur2, self.null3, self.null2)
        return sum(t.numel() * t.element_size() for t in (*held, *solve))

    @property
    def n(self) -> int:
        return int(self.mask.shape[-1])

    def workspace(self, heads: int, dtype: torch.dtype) -> torch.Tensor:
        """A reusable [heads, n + n²] summing buffer (kept with the layout: allocating and
        faulting in megabytes per layer costs more than the sums themselves)."""
        key = ("workspace", heads, dtype)
        if key not in self.extra:
            n = self.n
            self.extra[key] = torch.empty(heads, n * n + n, dtype=dtype, device=self.mask.device)
        return self.extra[key]

    @property
    def chance_r(self) -> float:
        """sqrt((rank − 1) / (|F| − 1)): the expected r of the three-axis fit to pure noise."""
        return float(np.sqrt(max(self.rank3 - 1, 0) / max(self.n_entries - 1, 1)))

    @property
    def chance_r_2axis(self) -> float:
        return float(np.sqrt(max(self.rank2 - 1, 0) / max(self.n_entries - 1, 1)))

    @classmethod
    def from_mask(cls, mask: torch.Tensor, device: torch.device | str | None = None) -> FitLayout:
        """Build the layout of fitted entries ``mask`` [n, n] bool (lower triangular)."""
        m = mask.detach().to("cpu", torch.bool)
        if m.ndim != 2 or m.shape[0] != m.shape[1]:
            raise ValueError(f"mask must be [n, n], got {tuple(m.shape)}")
        if bool(m.triu(1).any()):
            raise ValueError("fitted entries must be causal (j <= i); the mask has j > i entries")
        if not bool(m.any()):
            raise ValueError("no entry to fit: the mask is empty")
        n = m.shape[0]
        mf = m.double()
        c_db, c_dc = _distance_by_row(m), _distance_by_column(m)  # [n(d), n(i)], [n(d), n(j)]
        count_d, count_i, count_j = c_dc.sum(1), mf.sum(1), mf.sum(0)
        inv_d = torch.where(count_d > 0, 1.0 / count_d.clamp(min=1), 0.0)
        cross = torch.cat([c_db, c_dc], dim=1)  # [n, 2n]
        # Schur complements of the diagonal distance block: S = B − Cᵀ diag(1/n_d) C
        block = torch.zeros(2 * n, 2 * n, dtype=torch.float64)
        block[:n, :n], block[n:, n:] = torch.diag(count_i), torch.diag(count_j)
        block[:n, n:], block[n:, :n] = mf, mf.T
        schur3, rank_s3, null3 = _generalised_inverse(block - cross.T @ (inv_d[:, None] * cross))
        schur2, rank_s2, null2 = _generalised_inverse(
            torch.diag(count_j) - c_dc.T @ (inv_d[:, None] * c_dc)
        )
        used_d = int((count_d > 0).sum())  # rank(G) = rank(diagonal block) + rank(S)
        dev = torch.device(device) if device is not None else mask.device
        return cls(
            mask=m.to(dev),
            n_entries=int(m.sum()),
            count_d=count_d.to(dev),
            count_i=count_i.to(dev),
            count_j=count_j.to(dev),
            cross=cross.to(dev),
            inv_d=inv_d.to(dev),
            schur3=schur3.to(dev),
            schur2=schur2.to(dev),
            null3=_gram_null_space(null3, cross, inv_d).to(dev),
            null2=_gram_null_space(null2, c_dc, inv_d).to(dev),
            rank3=used_d + rank_s3,
            rank2=used_d + rank_s2,
        )


def _gather_mask(m: torch.Tensor, rows: torch.Tensor, cols: torch.Tensor) -> torch.Tensor:
    """out[d, x] = m[rows[d, x], cols[d, x]] where in range, else 0 (float64)."""
    n = m.shape[0]
    ok = (rows >= 0) & (rows < n) & (cols >= 0) & (cols < n)
    out = torch.zeros(rows.shape, dtype=torch.float64)
    out[ok] = m[rows[ok], cols[ok]].double()
    return out


def _distance_by_row(m: torch.Tensor) -> torch.Tensor:
    """C_db[d, i] = 1[(i, i−d) ∈ F] (float64 [n, n])."""
    n = m.shape[0]
    i = torch.arange(n)[None, :].expand(n, n)
    return _gather_mask(m, i, i - torch.arange(n)[:, None])


def _distance_by_column(m: torch.Tensor) -> torch.Tensor:
    """C_dc[d, j] = 1[(j+d, j) ∈ F] (float64 [n, n])."""
    n = m.shape[0]
    j = torch.arange(n)[None, :].expand(n, n)
    return _gather_mask(m, j + torch.arange(n)[:, None], j)


def _generalised_inverse(gram: torch.Tensor) -> tuple[torch.Tensor, int, torch.Tensor]:
    """A symmetric generalised inverse G⁻ of a PSD matrix G (float64), its rank, and an
    orthonormal basis [m, m − rank] of its null space.

    Pivoted Cholesky (LAPACK ``dpstrf``) picks ``rank`` independent parameters B:
    Pᵀ G P = Uᵀ U with U = [U₁₁ U₁₂] on its first ``rank`` rows. G⁻ holds G_BB⁻¹ on B × B
    and zeros elsewhere; for s in the range of G, θ = G⁻s solves Gθ = s. The null space is
    spanned by P [−U₁₁⁻¹U₁₂; I]. Used on the Schur complements S (module doc).
    """
    from scipy.linalg.lapack import dpstrf

    g = gram.numpy()
    m = g.shape[0]
    factor, piv, rank, info = dpstrf(g, tol=_RANK_TOL * float(np.max(np.diag(g))), lower=0)
    if info < 0:
        raise RuntimeError(f"pivoted Cholesky failed (LAPACK info {info})")
    order = torch.from_numpy(piv.astype(np.int64) - 1)
    keep = order[:rank]
    u = torch.from_numpy(np.triu(factor[:rank]))  # [rank, m] in pivoted order
    upper = u[:, :rank]  # G_BB = UᵀU
    inv = torch.zeros_like(gram)
    inv[keep[:, None], keep[None, :]] = torch.cholesky_inverse(upper, upper=True)
    basis = torch.zeros(m, m - rank, dtype=torch.float64)
    if m > rank:
        basis[order[:rank]] = -torch.linalg.solve_triangular(upper, u[:, rank:], upper=True)
        basis[order[rank:]] = torch.eye(m - rank, dtype=torch.float64)
        basis = torch.linalg.qr(basis).Q
    return inv, int(rank), basis


def _gram_null_space(null_s: torch.Tensor, cross: torch.Tensor, inv_d: torch.Tensor):
    """Orthonormal basis of G's null space from S's: G (θ_d, θ_x) = 0 exactly when
    S θ_x = 0 and θ_d = −C θ_x / n_d (distances without entries: their unit vectors, on
    which every s is exactly 0, are left out)."""
    if null_s.shape[1] == 0:
        return torch.zeros(cross.shape[0] + null_s.shape[0], 0, dtype=torch.float64)
    full = torch.cat([-(cross @ null_s) * inv_d[:, None], null_s], dim=0)
    return torch.linalg.qr(full).Q


def mask_digest(mask: torch.Tensor) -> str:
    """A stable key for a bool mask (BLAKE2b of its bytes and shape)."""
    arr = mask.detach().to("cpu", torch.bool).numpy()
    h = hashlib.blake2b(digest_size=16)
    h.update(str(arr.shape).encode())
    h.update(np.packbits(arr).tobytes())
    return h.hexdigest()


class LayoutCache:
    """Layouts keyed by (mask bytes, device): built once, reused across heads, layers, docs."""

    def __init__(self) -> None:
        self._layouts: dict[tuple[str, str], FitLayout] = {}

    def get(self, mask: torch.Tensor, device: torch.device | str | None = None) -> FitLayout:
        dev = torch.device(device) if device is not None else mask.device
        key = (mask_digest(mask), str(dev))
        if key not in self._layouts:
            self._layouts[key] = FitLayout.from_mask(mask, dev)
        return self._layouts[key]

    def __len__(self) -> int:
        return len(self._layouts)


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
    diag, cols = _padded_diagonal_sums(buf, n).to(f64), x.sum(-2).to(f64)
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
    n = layout.n
    theta, ess = _solve(s.diag, torch.cat([s.rows, s.cols], dim=-1), layout.cross, layout)
    ess2 = _solve(s.diag, s.cols, layout.cross[:, n:], layout, two_axis=True)[1]
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


def _solve(s_d, s_x, cross, layout: FitLayout, two_axis: bool = False):
    """θ and ESS = θᵀs of G θ = s by block elimination of the diagonal distance block.

    With G = [[diag(n_d), C], [Cᵀ, B]] and s = (s_d, s_x): θ_x = S⁻ t with
    t = s_x − Cᵀ s_d / n_d, θ_d = (s_d − C θ_x) / n_d. Exact sums lie in the range of G;
    rounded ones lie a little off it, and S⁻ need not ignore that part, so s is first
    projected orthogonally onto the range of G (G is symmetric: the range is the orthogonal
    complement of the null space, whose basis the layout holds).
    Returns θ = (θ_d, θ_x) [P, n + width of s_x] and ESS = θᵀs [P].
    """
    schur, null = (layout.schur2, layout.null2) if two_axis else (layout.schur3, layout.null3)
    inv_d, n = layout.inv_d, layout.n
    s_all = torch.cat([s_d, s_x], dim=-1)
    s_all = s_all - (s_all @ null) @ null.T
    s_d, s_x = s_all[:, :n], s_all[:, n:]
    t = s_x - (s_d * inv_d) @ cross
    theta_x = t @ schur
    theta_d = (s_d - theta_x @ cross.T) * inv_d
    ess = (theta_d * s_d).sum(-1) + (theta_x * s_x).sum(-1)
    return torch.cat([theta_d, theta_x], dim=-1), ess


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
