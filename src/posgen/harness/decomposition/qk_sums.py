"""The sums of the fit straight from the model's post-RoPE queries and keys: no logit map.

For a causal (or band) layer without soft-capping the logits are bilinear, W[i, j] =
q_i·k_j (q already multiplied by the layer's scaling; q, k [P, n, d] as the capture hands
them over), so every sum the fit needs is a sum of q's and k's. Over the fitted entries F
of a ``CausalLayout`` (k sink keys, d₀ = 1 without the diagonal, the band d < W' =
min(W, n); W' = n when causal) and the query rows i ≥ r::

    rows[i]  = q_i · Σ_{max(k, i−W'+1) ≤ j ≤ i−d₀} k_j            (prefix sums of k, O(P n d))
    cols[j]  = k_j · Σ_{max(r, j+d₀) ≤ i < j+W'} q_i               (suffix sums of q)
    diag[t]  = Σ_{i ≥ r} q_i · k_{i−t},  d₀ ≤ t < W'                (cross-correlation: FFT)
    sq[i]    = q_iᵀ (Σ_{e−W' ≤ j < s} k_j k_jᵀ) q_i + Σ_{j explicit} (q_i·k_j)²
               for i in a block [s, e) of query rows              (O(P n d (d + block)))

(k_j = 0 for sink keys). In the sum of squares, the keys every row of the block sees
(e − W' ≤ j < s) enter through their Gram matrix (a running sum, less the keys that left
the band); the others (the block's own keys, and in a band the strip s − W' < j < e − W'
at its lower edge) are multiplied out, masked to the band. Everything runs in float64; the
FFT's rounding is ~1e-15 of ‖q‖‖k‖ per sum. Cost O(P n d (d + block) + P d n log n)
against O(P n² d) for the logit map, memory O(P n d + P d² + P block²). The distance map
D[i, j] = s·q_i·R(j)k̄ of the distance + key form has the same shape with k_j = R(j)k̄
(diagonal and column sums only).
"""

from __future__ import annotations

import torch

from posgen.harness.decomposition.block_sums import RawSums

SQUARE_BLOCK = 128  # query rows per block of the sum of squares


def causal_qk_sums(q: torch.Tensor, k: torch.Tensor, layout, first_row: int = 0, squares=True):
    """``RawSums`` of W = q kᵀ over the fitted entries of rows i ≥ ``first_row`` of a
    ``CausalLayout``, causal or band (module doc).

    ``q``, ``k`` [P, n, d] (q scaled), any float dtype; results float64 [P, n] ([P] squares,
    zero without ``squares``).
    """
    sinks, d0, band = layout.sink_keys, layout.diag_offset, layout.band
    q, k = q.double(), k.double().clone()
    k[:, :sinks] = 0.0  # sink keys are not fitted
    q = q.clone()
    q[:, :first_row] = 0.0  # nor are rows before first_row
    k_sum = k.cumsum(1)
    k_prefix = _shift_rows(k_sum, d0) - _shift_rows(k_sum, band)  # Σ_{i−W' < j ≤ i − d₀} k_j
    rows = (q * k_prefix).sum(-1)
    q_sum = q.flip(1).cumsum(1).flip(1)  # Σ_{i ≥ m} q_i
    q_band = _shift_rows(q_sum, -d0) - _shift_rows(q_sum, -band)  # Σ_{j+d₀ ≤ i < j+W'} q_i
    cols = (k * q_band).sum(-1)
    diag = _correlation(q, k)
    diag[:, :d0] = 0.0
    diag[:, band:] = 0.0
    sq = _row_squares(q, k, d0, first_row, band) if squares else torch.zeros_like(rows)
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


def _row_squares(
    q: torch.Tensor, k: torch.Tensor, d0: int, first_row: int, band: int | None = None
) -> torch.Tensor:
    """sq[p, i] = Σ_{i−W' < j ≤ i − d₀} (q_i·k_j)², [P, n], in blocks of ``SQUARE_BLOCK`` rows
    (module doc); ``band`` W' (None: n, causal)."""
    p, n, d = q.shape
    band = n if band is None else min(band, n)
    out = torch.zeros(p, n, dtype=q.dtype, device=q.device)
    start0 = (first_row // SQUARE_BLOCK) * SQUARE_BLOCK
    seen = torch.zeros(p, d, d, dtype=q.dtype, device=q.device)  # Σ_{low ≤ j < s} k_j k_jᵀ
    low = 0  # keys below low have left the band of every later row
    for start in range(start0, n, SQUARE_BLOCK):
        stop = min(start + SQUARE_BLOCK, n)
        shared = min(max(0, stop - band), start)  # keys shared ≤ j < start: seen by every row
        if start == start0:
            low = shared
            seen = k[:, low:start].transpose(1, 2) @ k[:, low:start]
        elif shared > low:  # keys that left the band
            seen -= k[:, low:shared].transpose(1, 2) @ k[:, low:shared]
            low = shared
        qb = q[:, start:stop]
        edge_lo = max(0, start - band + 1)  # the strip edge_lo ≤ j < shared: partly in the band
        keys = torch.cat([k[:, edge_lo:shared], k[:, start:stop]], dim=1)
        j = torch.cat([torch.arange(edge_lo, shared), torch.arange(start, stop)]).to(q.device)
        i = torch.arange(start, stop, device=q.device)[:, None]
        inside = (i - j >= d0) & (i - j < band)
        inner = (qb @ keys.transpose(1, 2)) * inside  # [P, r, strip + r]
        out[:, start:stop] = ((qb @ seen) * qb).sum(-1) + (inner**2).sum(-1)
        seen += k[:, start:stop].transpose(1, 2) @ k[:, start:stop]
    return out
