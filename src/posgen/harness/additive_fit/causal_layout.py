"""The fit layout of a causal or band mask, solved from its structure: O(n) per product, no
n × n matrix.

Fitted entries F = {(i, j): k ≤ j, d₀ ≤ i − j < W, 0 ≤ i < n}: causal (W ≥ n) or the band
of the last W keys (Λ attention's local branch), without the first k key positions (sink
keys) and, with d₀ = 1, without the diagonal. With W' = min(W, n), the normal equations
G θ = s of :mod:`posgen.harness.additive_fit.logit_fit` then have

    n_d[d] = n − d − k (d₀ ≤ d < W'),   n_i[i] = i − d₀ + 1 − max(k, i − W' + 1),
    n_j[j] = min(n, j + W') − j − d₀ (j ≥ k)

(negative counts read 0) and incidence products that are windowed prefix sums. With
θ = (a, b, c), A[m] = Σ_{d ≤ m} a[d], C[m] = Σ_{j ≤ m} c[j] and B'[m] = Σ_{i ≥ m} b[i]
(unused parameters held at 0, C[m] = 0 for m < 0, B'[m] = 0 for m ≥ n)::

    (G θ)_a[d] = n_d a[d] + B'[k + d]   + C[n − 1 − d]
    (G θ)_b[i] = n_i b[i] + A[i − k]    + C[i − d₀] − C[i − W']
    (G θ)_c[j] = n_j c[j] + A[n − 1 − j] + B'[j + d₀] − B'[j + W']

(the two-axis model drops b and every B' term; a[d] = 0 for d ≥ W' keeps A's windows
implicit). Causal is the case W' = n, where the − C and − B' terms vanish. Products with G cost O(P n) for P heads,
so the system is solved by conjugate gradients preconditioned by diag(G) (the counts),
batched over heads. G is singular; its null space over the used parameters is spanned by
(a, b, c) = (1, −1, 0), (1, 0, −1) and (d, −i, j) (two-axis: (1, −1) on (a, c)), so the
sums s are first projected onto its orthogonal complement, the range of G; CG started at 0
then stays in it and converges to the minimum-norm solution. The fitted values and
ESS = θᵀs do not depend on which solution is found. rank(G) = used parameters − 3 (two
axes: − 1) when at least three query rows have entries and, in a band, at least two
distances are fitted (``CausalLayout.supports``: two consecutive distances tie c[j + 1] −
c[j] to a[d + 1] − a[d], so c and a are linear on the null space); smaller masks use the
dense layout.

Cost per solve: O(P n) per iteration, about 17 iterations to a relative residual of 1e-12
at n = 1024 … 16384 (the Jacobi-scaled G is well conditioned); on one intra-op thread, since
hand-offs between threads cost more than they save on such vectors. Memory: a few
[P', 3n] float64 vectors, the heads solved in batches of P' (``SOLVE_CHUNK_BYTES`` per
vector: small allocations the C allocator reuses instead of mapping fresh pages).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import numpy as np
import torch

CG_TOLERANCE = 1e-12  # stop when ‖r‖ ≤ tol · ‖s‖ for every head (preconditioned norms)
CG_MAX_ITERATIONS = 2000
SOLVE_CHUNK_BYTES = 4 * 2**20  # float64 [heads, 3n] per batch of heads solved together


class LayoutCommon:
    """What every layout offers beside its solve: a summing workspace and chance levels.

    Needs ``n``, ``extra``, ``count_d``, ``rank3``, ``rank2`` and ``n_entries``."""

    def workspace(self, heads: int, dtype: torch.dtype) -> torch.Tensor:
        """A reusable [heads, n + n²] summing buffer (kept with the layout: allocating and
        faulting in megabytes per layer costs more than the sums themselves)."""
        key = ("workspace", heads, dtype)
        if key not in self.extra:
            n = self.n
            self.extra[key] = torch.empty(heads, n * n + n, dtype=dtype, device=self.count_d.device)
        return self.extra[key]

    @property
    def chance_r(self) -> float:
        """sqrt((rank − 1) / (|F| − 1)): the expected r of the three-axis fit to pure noise."""
        return float(np.sqrt(max(self.rank3 - 1, 0) / max(self.n_entries - 1, 1)))

    @property
    def chance_r_2axis(self) -> float:
        return float(np.sqrt(max(self.rank2 - 1, 0) / max(self.n_entries - 1, 1)))


@dataclass
class CausalLayout(LayoutCommon):
    """Counts and O(n) products of the causal mask, or of the band of ``window`` keys
    (None: causal), with ``sink_keys`` and the diagonal option."""

    size: int
    sink_keys: int = 0
    include_diagonal: bool = True
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))
    extra: dict = field(default_factory=dict)
    iterations: int = 0  # CG iterations of the last solve, its slowest batch (for benchmarks)
    window: int | None = None  # fit 0 ≤ i − j < window only (Λ's local band); None: causal

    def __post_init__(self) -> None:
        if self.window is not None and self.window < 1:
            raise ValueError(f"band window must be >= 1, got {self.window}")
        if not self.supports(self.size, self.sink_keys, self.include_diagonal, self.window):
            raise ValueError(
                f"causal layout needs >= 3 query rows with entries and, in a band, >= 2 "
                f"fitted distances (n={self.size}, sink_keys={self.sink_keys}, "
                f"include_diagonal={self.include_diagonal}, window={self.window})"
            )
        n, k, d0, w = self.size, self.sink_keys, self.diag_offset, self.band
        pos = torch.arange(n, dtype=torch.float64, device=self.device)
        self.count_d = torch.where((pos >= d0) & (pos < w), (n - pos - k).clamp(min=0), 0.0)
        self.count_i = (pos - d0 + 1 - torch.clamp(pos - w + 1, min=k)).clamp(min=0)
        last = torch.clamp(pos + w, max=n)  # one past the last row that sees key j
        self.count_j = torch.where(pos >= k, (last - pos - d0).clamp(min=0), 0.0)
        self.inv_d = torch.where(self.count_d > 0, 1.0 / self.count_d.clamp(min=1), 0.0)
        self.n_entries = int(self.count_i.sum())
        used = [(c > 0).double() for c in (self.count_d, self.count_i, self.count_j)]
        self.used_d, self.used_i, self.used_j = used
        self.rank3 = int(sum(u.sum() for u in used)) - 3
        self.rank2 = int(self.used_d.sum() + self.used_j.sum()) - 1
        self.null3 = _orthonormal(
            [
                torch.cat([self.used_d, -self.used_i, 0 * self.used_j]),
                torch.cat([self.used_d, 0 * self.used_i, -self.used_j]),
                torch.cat([pos * self.used_d, -pos * self.used_i, pos * self.used_j]),
            ]
        )
        self.null2 = _orthonormal([torch.cat([self.used_d, -self.used_j])])

    @staticmethod
    def supports(n: int, sink_keys: int, include_diagonal: bool, window: int | None = None) -> bool:
        """Whether the structured layout applies: at least three query rows with entries
        and at least two fitted distances (module doc)."""
        d0 = 0 if include_diagonal else 1
        band = n if window is None else min(window, n)
        return n - sink_keys - d0 >= 3 and min(band, n - sink_keys) - d0 >= 2

    @property
    def n(self) -> int:
        return self.size

    @property
    def band(self) -> int:
        """W' = min(window, n): the fitted distances are d₀ ≤ d < W'."""
        return self.size if self.window is None else min(self.window, self.size)

    @property
    def is_band(self) -> bool:
        """Whether the band leaves out entries of the causal mask (W < n)."""
        return self.band < self.size

    @property
    def description(self) -> str:
        """``causal``, or ``band:W`` when the band leaves out causal entries."""
        return f"band:{self.window}" if self.is_band else "causal"

    @property
    def diag_offset(self) -> int:
        return 0 if self.include_diagonal else 1

    @property
    def mask(self) -> torch.Tensor:
        """[n, n] bool F (built on first use: O(n²) memory, only for the dense sums)."""
        if "mask" not in self.extra:
            self.extra["mask"] = self.block_mask(0, self.size)
        return self.extra["mask"]

    def block_mask(self, start: int, stop: int) -> torch.Tensor:
        """F on query rows start..stop−1: [stop − start, n] bool."""
        i = torch.arange(start, stop, device=self.device)[:, None]
        j = torch.arange(self.size, device=self.device)[None, :]
        return (j >= self.sink_keys) & (j <= i - self.diag_offset) & (i - j < self.band)

    @property
    def held_bytes(self) -> int:
        held = (self.count_d, self.count_i, self.count_j, self.inv_d, self.null3, self.null2)
        return sum(t.numel() * t.element_size() for t in held)

    def dc_product(self, a: torch.Tensor) -> torch.Tensor:
        """(a C_dc)[p, j] = Σ_d a[p, d] 1[(j + d, j) ∈ F] = A[n − 1 − j] for j ≥ k, [P, n]."""
        return (a * self.used_d).cumsum(-1).flip(-1) * self.used_j

    def _product(self, theta: torch.Tensor, two_axis: bool) -> torch.Tensor:
        """G θ on used parameters for θ that is 0 on unused ones; entries of unused
        parameters in the result are not 0 (the solver ignores them). The prefix sums at
        affine indices are shifted (and reversed) cumulative sums, added in place."""
        n, k, d0, w = self.size, self.sink_keys, self.diag_offset, self.band
        a, c = theta[:, :n], theta[:, -n:]
        out = torch.empty_like(theta)
        out_a, out_c = out[:, :n], out[:, -n:]
        a_sum, c_sum = a.cumsum(-1), c.cumsum(-1)  # A[m], C[m]
        torch.mul(a, self.count_d, out=out_a).add_(c_sum.flip(-1))  # + C[n − 1 − d]
        torch.mul(c, self.count_j, out=out_c).add_(a_sum.flip(-1))  # + A[n − 1 − j]
        if two_axis:
            return out
        b, out_b = theta[:, n : 2 * n], out[:, n : 2 * n]
        b_tail = b.flip(-1).cumsum(-1).flip(-1)  # B'[m] = Σ_{i ≥ m} b[i]
        out_a[:, : n - k] += b_tail[:, k:]  # B'[k + d]
        torch.mul(b, self.count_i, out=out_b)
        out_b[:, k:] += a_sum[:, : n - k]  # A[i − k]
        out_b[:, d0:] += c_sum[:, : n - d0]  # C[i − d₀]
        out_c[:, : n - d0] += b_tail[:, d0:]  # B'[j + d₀]
        if w < n:  # the band: keys j ≤ i − W' and rows i ≥ j + W' are out
            out_b[:, w:] -= c_sum[:, : n - w]  # − C[i − W']
            out_c[:, : n - w] -= b_tail[:, w:]  # − B'[j + W']
        return out

    def row_moments(self, a: torch.Tensor, b: torch.Tensor, c: torch.Tensor, first_row: int):
        """Σ f, Σ f² [P] and the entry count over the fitted entries of rows i ≥ ``first_row``,
        f[i, j] = a[i−j] + b[i] + c[j] (a, b, c [P, n], unused entries finite), O(P n)::

            Σ f² = Σ_d a² n_d' + Σ_i b² n_i' + Σ_j c² n_j'
                   + 2 Σ_{i ≥ r} b[i] (A[i − k] + C[i − d₀] − C[i − W'])
                   + 2 Σ_j c[j] (A[n−1−j] − A[m_j])

        with n_d' = n − max(r, k + d), n_i' = n_i 1[i ≥ r], n_j' = min(n, j + W') −
        max(r, j + d₀) (≥ 0, on used parameters) and m_j = max(r − j, d₀) − 1 (A[−1] = 0;
        a[d] = 0 for d ≥ W' keeps the band in the A terms).
        """
        n, k, d0, r, w = self.size, self.sink_keys, self.diag_offset, first_row, self.band
        pos = torch.arange(n, dtype=torch.float64, device=a.device)
        a, b, c = a * self.used_d, b * self.used_i, c * self.used_j
        cnt_d = (n - torch.clamp(k + pos, min=r)).clamp(min=0) * self.used_d
        cnt_i = self.count_i * (pos >= r)
        last = torch.clamp(pos + w, max=n)
        cnt_j = (last - torch.clamp(pos + d0, min=r)).clamp(min=0) * self.used_j
        a_sum, c_sum = a.cumsum(-1), c.cumsum(-1)
        tail = (torch.clamp(r - pos, min=d0) - 1).long()  # m_j
        a_before = torch.where(tail >= 0, a_sum[:, tail.clamp(min=0)], 0.0)
        row_c = _shift(c_sum, d0) - _shift(c_sum, w)  # C[i − d₀] − C[i − W']
        cross = (b * (pos >= r) * (_shift(a_sum, k) + row_c)).sum(-1)
        cross = cross + (c * (a_sum.flip(-1) - a_before)).sum(-1)
        total = (a * cnt_d).sum(-1) + (b * cnt_i).sum(-1) + (c * cnt_j).sum(-1)
        squares = (a**2 * cnt_d).sum(-1) + (b**2 * cnt_i).sum(-1) + (c**2 * cnt_j).sum(-1)
        return total, squares + 2 * cross, int(cnt_i.sum())

    def solve(self, s_d: torch.Tensor, s_x: torch.Tensor, two_axis: bool = False):
        """θ [P, n + width of s_x] and ESS = θᵀs [P] of G θ = s, s = (s_d, s_x) (module doc).

        The heads are solved in batches of ``SOLVE_CHUNK_BYTES`` per [heads, 3n] vector
        (each head's CG is independent of the others'; a batch stops when all its heads
        have converged), so the solver's vectors stay small whatever the number of heads."""
        null = self.null2 if two_axis else self.null3
        s = torch.cat([s_d, s_x], dim=-1)
        diag = torch.cat([self.count_d, self.count_j] if two_axis else self._counts())
        rows = max(1, SOLVE_CHUNK_BYTES // (s.shape[-1] * s.element_size()))
        thetas, esses, self.iterations = [], [], 0
        with one_thread():  # O(P n) vectors: thread hand-offs cost more than they save
            for start in range(0, s.shape[0], rows):
                part = s[start : start + rows]
                part = part - (part @ null) @ null.T  # onto the range of G
                theta, iterations = _conjugate_gradients(
                    lambda x: self._product(x, two_axis), part, diag
                )
                thetas.append(theta)
                esses.append((theta * part).sum(-1))
                self.iterations = max(self.iterations, iterations)
        return torch.cat(thetas), torch.cat(esses)

    def _counts(self) -> list[torch.Tensor]:
        return [self.count_d, self.count_i, self.count_j]


def _shift(x: torch.Tensor, k: int) -> torch.Tensor:
    """out[p, m] = x[p, m − k], 0 where m − k is out of range (x [P, n])."""
    if k == 0:
        return x
    if k > 0:
        return torch.nn.functional.pad(x[:, : x.shape[-1] - k], (k, 0))
    return torch.nn.functional.pad(x[:, -k:], (0, -k))


@contextmanager
def one_thread() -> Iterator[None]:
    """torch on one intra-op thread within the block (restored after)."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


def _orthonormal(vectors: list[torch.Tensor]) -> torch.Tensor:
    return torch.linalg.qr(torch.stack(vectors, dim=1)).Q


def _conjugate_gradients(product, s: torch.Tensor, diag: torch.Tensor) -> tuple[torch.Tensor, int]:
    """(x [P, m], iterations) with G x = s for every row of ``s`` [P, m] (G PSD via
    ``product``, s in its range), Jacobi-preconditioned; zero diagonal entries (unused
    parameters) stay 0."""
    if not bool(torch.isfinite(s).all()):
        raise ValueError("the logit sums are not finite (NaN or inf in the captured logits)")
    inv = torch.where(diag > 0, 1.0 / diag.clamp(min=1), 0.0)
    x = torch.zeros_like(s)
    r = s * (diag > 0)  # unused parameters: 0 throughout (z, p, x stay 0 there)
    z = r * inv
    p = z.clone()
    rz = (r * z).sum(-1)
    stop = (CG_TOLERANCE**2) * rz.clamp(min=torch.finfo(s.dtype).tiny)
    for it in range(1, CG_MAX_ITERATIONS + 1):
        gp = product(p)  # entries of unused parameters are ignored: z = r · 0 there
        curvature = (p * gp).sum(-1)
        alpha = torch.where(curvature > 0, rz / curvature.clamp(min=1e-300), 0.0)[:, None]
        x.add_(p * alpha)
        r.sub_(gp.mul_(alpha))
        torch.mul(r, inv, out=z)
        rz_next = (r * z).sum(-1)
        if bool((rz_next <= stop).all()):
            return x, it
        beta = torch.where(rz > 0, rz_next / rz.clamp(min=1e-300), 0.0)[:, None]
        p.mul_(beta).add_(z)
        rz = rz_next
    raise RuntimeError(
        f"conjugate gradients did not converge in {CG_MAX_ITERATIONS} iterations (n={s.shape[-1]})"
    )
