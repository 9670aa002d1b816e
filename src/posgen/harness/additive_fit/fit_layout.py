"""The layout of the exact logit fit: which entries are fitted, and the factorised Gram
matrix shared by every head, layer and document with the same mask.

See :mod:`posgen.harness.additive_fit.logit_fit` for the equations (G, its Schur
complement S and the generalised inverse S⁻ built here, once per layout, in float64).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field

import numpy as np
import torch

from posgen.harness.additive_fit.causal_layout import CausalLayout, LayoutCommon

_RANK_TOL = 1e-7  # pivots below _RANK_TOL * max diagonal count as null (1e-9 let rounding
# through at n = 1024: a spurious rank, r off by 1e-4; nonzero eigenvalues of S are >= ~1 here)


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
    return padded_diagonal_sums(flat, n).reshape(*x.shape[:-2], n)


def padded_diagonal_sums(flat: torch.Tensor, n: int) -> torch.Tensor:
    """Diagonal sums from ``flat`` [p, n + n²] = (n zeros, lower-triangular x row-major).

    Entry (i, e) with e = n−1−d sits at flat index 1 + i(n+1) + e: a strided view, no copy;
    out-of-range reads land on the zero padding or the (zero) strict upper triangle.
    """
    view = flat.as_strided(
        (flat.shape[0], n, n), (flat.stride(0), n + 1, 1), storage_offset=flat.storage_offset() + 1
    )
    return view.sum(-2).flip(-1)


@dataclass
class FitLayout(LayoutCommon):
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

    def solve(self, s_d: torch.Tensor, s_x: torch.Tensor, two_axis: bool = False):
        """θ and ESS = θᵀs of G θ = s by block elimination of the diagonal distance block.

        With G = [[diag(n_d), C], [Cᵀ, B]] and s = (s_d, s_x) [P, n], [P, 2n or n]:
        θ_x = S⁻ t with t = s_x − Cᵀ s_d / n_d, θ_d = (s_d − C θ_x) / n_d. Exact sums lie in
        the range of G; rounded ones lie a little off it, and S⁻ need not ignore that part,
        so s is first projected orthogonally onto the range of G (G is symmetric: the range
        is the orthogonal complement of the null space, whose basis the layout holds).
        Returns θ = (θ_d, θ_x) [P, n + width of s_x] and ESS = θᵀs [P].
        """
        n = self.n
        schur, null = (self.schur2, self.null2) if two_axis else (self.schur3, self.null3)
        cross = self.cross[:, n:] if two_axis else self.cross
        s_all = torch.cat([s_d, s_x], dim=-1)
        s_all = s_all - (s_all @ null) @ null.T
        s_d, s_x = s_all[:, :n], s_all[:, n:]
        theta_x = (s_x - (s_d * self.inv_d) @ cross) @ schur
        theta_d = (s_d - theta_x @ cross.T) * self.inv_d
        ess = (theta_d * s_d).sum(-1) + (theta_x * s_x).sum(-1)
        return torch.cat([theta_d, theta_x], dim=-1), ess

    def dc_product(self, a: torch.Tensor) -> torch.Tensor:
        """a C_dc: [P, n] × [n, n] → [P, n], (a C_dc)[j] = Σ_d a[d] 1[(j + d, j) ∈ F]."""
        return a @ self.c_dc

    def block_mask(self, start: int, stop: int) -> torch.Tensor:
        """F on query rows start..stop−1: [stop − start, n] bool."""
        return self.mask[start:stop]

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


def band_mask(n: int, window: int, device: torch.device | str | None = None) -> torch.Tensor:
    """[n, n] bool, True where 0 ≤ i − j < ``window`` (causal for window ≥ n)."""
    i = torch.arange(n, device=device)[:, None]
    j = torch.arange(n, device=device)[None, :]
    return (j <= i) & (i - j < window)


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

    def causal(
        self,
        n: int,
        options: FitOptions,
        device: torch.device | str | None = None,
        window: int | None = None,
    ) -> FitLayout | CausalLayout:
        """The layout of the causal mask of n tokens under ``options``, or of its band
        0 ≤ i − j < ``window``: the structured :class:`CausalLayout` (O(n) memory, no n × n
        solve) where it applies, else dense."""
        dev = torch.device(device if device is not None else "cpu")
        window = None if window is None or window >= n else window
        key = (f"causal:{n}:{options.sink_keys}:{options.include_diagonal}:{window}", str(dev))
        if key not in self._layouts:
            if CausalLayout.supports(n, options.sink_keys, options.include_diagonal, window):
                layout = CausalLayout(
                    n, options.sink_keys, options.include_diagonal, dev, window=window
                )
            else:
                full = band_mask(n, n if window is None else window, dev)
                layout = FitLayout.from_mask(options.apply(full), dev)
            self._layouts[key] = layout
        return self._layouts[key]

    def __len__(self) -> int:
        return len(self._layouts)
