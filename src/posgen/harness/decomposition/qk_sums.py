"""The sums of the fit straight from the model's post-RoPE queries and keys: no logit map.

For a causal layer without soft-capping the logits are bilinear, W[i, j] = q_i·k_j (q
already multiplied by the layer's scaling; q, k [P, n, d] as the capture hands them over),
so every sum the fit needs is a sum of q's and k's. Over the fitted entries F of a
``CausalLayout`` (k sink keys, d₀ = 1 without the diagonal) and the query rows i ≥ r::

    rows[i]  = q_i · Σ_{k ≤ j ≤ i−d₀} k_j                        (prefix sums of k, O(P n d))
    cols[j]  = k_j · Σ_{i ≥ max(r, j+d₀)} q_i                    (suffix sums of q)
    diag[t]  = Σ_{i ≥ r} q_i · k_{i−t},  t ≥ d₀                  (cross-correlation: FFT)
    sq[i]    = q_iᵀ (Σ_{j < s} k_j k_jᵀ) q_i + Σ_{s ≤ j ≤ i−d₀} (q_i·k_j)²
               for i in a block of query rows starting at s      (O(P n d (d + block)))

(k_j = 0 for sink keys). Everything runs in float64; the FFT's rounding is ~1e-15 of
‖q‖‖k‖ per sum. Cost O(P n d (d + block) + P d n log n) against O(P n² d) for the logit
map, memory O(P n d + P d²). The distance map D[i, j] = s·q_i·R(j)k̄ of the distance + key
form has the same shape with k_j = R(j)k̄ (diagonal and column sums only).
"""

from __future__ import annotations

import torch

from posgen.harness.decomposition.block_sums import RawSums

SQUARE_BLOCK = 128  # query rows per block of the sum of squares


def causal_qk_sums(q: torch.Tensor, k: torch.Tensor, layout, first_row: int = 0, squares=True):
    """``RawSums`` of W = q kᵀ over the fitted entries of rows i ≥ ``first_row`` (module doc).

    ``q``, ``k`` [P, n, d] (q scaled), any float dtype; results float64 [P, n] ([P] squares,
    zero without ``squares``).
    """
    sinks, d0 = layout.sink_keys, layout.diag_offset
    q, k = q.double(), k.double().clone()
    k[:, :sinks] = 0.0  # sink keys are not fitted
    q = q.clone()
    q[:, :first_row] = 0.0  # nor are rows before first_row
    k_prefix = _shift_rows(k.cumsum(1), d0)  # Σ_{j ≤ i − d₀} k_j
    rows = (q * k_prefix).sum(-1)
    q_suffix = q.flip(1).cumsum(1).flip(1)  # Σ_{i ≥ m} q_i
    cols = (k * _shift_rows(q_suffix, -d0)).sum(-1)
    diag = _correlation(q, k)
    diag[:, :d0] = 0.0
    sq = _row_squares(q, k, d0, first_row) if squares else torch.zeros_like(rows)
    return RawSums(diag, rows, cols, sq.sum(-1))


def _shift_rows(x: torch.Tensor, t: int) -> torch.Tensor:
    """out[:, m] = x[:, m − t] (0 out of range), x [P, n, d]."""
    if t == 0:
        return x
    out = torch.zeros_like(x)
    if t > 0:
        out[:, t:] = x[:, :-t]
    else:
        out[:, :t] = x[:, -t:]
    return out


def _correlation(q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """c[p, t] = Σ_i q[p, i]·k[p, i − t] for t = 0..n−1 (k = 0 before 0), [P, n] float64."""
    n = q.shape[1]
    size = 2 * n  # no wrap-around
    fq = torch.fft.rfft(q.transpose(1, 2).contiguous(), n=size)  # [P, d, n + 1], contiguous
    fk = torch.fft.rfft(k.transpose(1, 2).contiguous(), n=size)
    return torch.fft.irfft((fq * fk.conj()).sum(1), n=size)[:, :n]


def _row_squares(q: torch.Tensor, k: torch.Tensor, d0: int, first_row: int) -> torch.Tensor:
    """sq[p, i] = Σ_{j ≤ i − d₀} (q_i·k_j)², [P, n], in blocks of ``SQUARE_BLOCK`` rows."""
    p, n, d = q.shape
    out = torch.zeros(p, n, dtype=q.dtype, device=q.device)
    before = torch.zeros(p, d, d, dtype=q.dtype, device=q.device)  # Σ_{j < s} k_j k_jᵀ
    start0 = (first_row // SQUARE_BLOCK) * SQUARE_BLOCK
    if start0:
        before = k[:, :start0].transpose(1, 2) @ k[:, :start0]
    for start in range(start0, n, SQUARE_BLOCK):
        stop = min(start + SQUARE_BLOCK, n)
        qb, kb = q[:, start:stop], k[:, start:stop]
        prior = ((qb @ before) * qb).sum(-1)  # q_iᵀ M q_i
        inner = (qb @ kb.transpose(1, 2)).tril(-d0)  # [P, r, r], j ≤ i − d₀ within the block
        out[:, start:stop] = prior + (inner**2).sum(-1)
        before += kb.transpose(1, 2) @ kb
    return out
