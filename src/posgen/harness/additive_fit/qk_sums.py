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
against O(P n² d) for the logit map. The distance map D[i, j] = s·q_i·R(j)k̄ of the
distance + key form has the same shape with k_j = R(j)k̄ (diagonal and column sums only).

:func:`layer_qk_sums` computes one layer's sums over all rows (r = 0), over the rows past
a split (r = C, the ``past_context`` figures) and of D together, sharing what they have in
common: the rows and squares past C are those of all rows with the rows before C left
out, the suffix sums of q past C are those of all rows held at Σ_{i ≥ C} q_i below C, and
the transforms of q and k serve two correlations each. It runs a chunk of heads at a time
(``CHUNK_BYTES`` per [heads, n, d] float64 tensor), so its temporaries stay small (about
ten such tensors) whatever the number of heads: memory O(chunk n d + P d²), and
allocations small enough for the C allocator to reuse instead of mapping fresh pages.
"""

from __future__ import annotations

from typing import NamedTuple

import torch

from posgen.harness.additive_fit.logit_fit import RawSums

SQUARE_BLOCK = 128  # query rows per block of the sum of squares
CHUNK_BYTES = 8 * 2**20  # float64 [heads, n, d] per chunk of heads (at least one head)


class LayerQKSums(NamedTuple):
    """One layer's sums from q and k (float64): all fitted rows, the rows ≥ the split
    (None without one), and the (diagonal, column) sums [P, n] of the distance map (None
    without its keys)."""

    total: RawSums
    past: RawSums | None
    distance: tuple[torch.Tensor, torch.Tensor] | None


def layer_qk_sums(
    q: torch.Tensor,
    k: torch.Tensor,
    layout,
    scaling: float = 1.0,
    split: int | None = None,
    distance_keys: torch.Tensor | None = None,
) -> LayerQKSums:
    """``LayerQKSums`` of W = (scaling · q) kᵀ over the fitted entries of a ``CausalLayout``
    (module doc): ``q``, ``k`` and ``distance_keys`` (R(j)k̄, optional) [P, n, d], any float
    dtype; ``split`` (0 < split < n, optional) the first row of ``past``."""
    p, n, d = q.shape
    if split is not None and not 0 < split < n:
        raise ValueError(f"split must lie in 1..n−1 (n = {n}), got {split}")
    step = max(1, CHUNK_BYTES // (n * d * 8))
    parts = []
    for start in range(0, p, step):
        heads = slice(start, start + step)
        dk = None if distance_keys is None else distance_keys[heads]
        qd = (
            q[heads]
            .to(torch.float64, copy=True, memory_format=torch.contiguous_format)
            .mul_(scaling)
        )
        parts.append(_chunk_sums(qd, k[heads], dk, layout, split))
    total, past, distance = zip(*parts, strict=True)
    return LayerQKSums(
        RawSums(*_cat(total)),
        None if split is None else RawSums(*_cat(past)),
        None if distance_keys is None else _cat(distance),
    )


def causal_qk_sums(q: torch.Tensor, k: torch.Tensor, layout, first_row: int = 0) -> RawSums:
    """``RawSums`` of W = q kᵀ over the fitted entries of rows i ≥ ``first_row`` of a
    ``CausalLayout``, causal or band (module doc). ``q``, ``k`` [P, n, d] (q scaled), any
    float dtype; results float64 [P, n] ([P] squares)."""
    if first_row <= 0:
        return layer_qk_sums(q, k, layout).total
    if first_row >= q.shape[1]:
        zeros = torch.zeros(q.shape[:2], dtype=torch.float64, device=q.device)
        return RawSums(zeros, zeros.clone(), zeros.clone(), zeros.sum(-1))
    return layer_qk_sums(q, k, layout, split=first_row).past


def grouped_fit_sums(
    q: torch.Tensor, k: torch.Tensor, layout, scaling: float = 1.0
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """(diagonal, row, column) sums [P, n] float64 of W = (scaling · q) kᵀ over the fitted
    entries of a ``CausalLayout``: all the fit's terms need (no squares, so no r).

    ``q`` [P, n, d] and ``k`` [K, n, d] with P = K·g: query head p reads key head p // g
    (``repeat_kv``'s grouping), whose prefix sums and transform serve its g query heads."""
    p, n, d = q.shape
    groups = p // k.shape[0]
    if groups * k.shape[0] != p:
        raise ValueError(f"{p} query heads do not share {k.shape[0]} key heads evenly")
    sinks, d0, band = layout.sink_keys, layout.diag_offset, layout.band
    q = q.to(torch.float64, copy=True, memory_format=torch.contiguous_format).mul_(scaling)
    q = q.view(-1, groups, n, d)
    k = _fitted_keys(k, sinks)[:, None]  # [K, 1, n, d]: broadcast over the group
    k_sum = k.cumsum(2)
    rows = _row_dot(q, _shift_rows(k_sum, d0) - _shift_rows(k_sum, band))
    q_band = _band_sums(q.flip(2).cumsum(2).flip(2), d0, band)
    diag = _correlation(_spectrum(q), _spectrum(k), n, d0, band)
    return diag.view(p, n), rows.view(p, n), _row_dot(k, q_band).view(p, n)


def _cat(parts) -> tuple[torch.Tensor, ...]:
    """Per field, the chunks' tensors concatenated along heads."""
    return tuple(torch.cat(x) for x in zip(*parts, strict=True))


def _chunk_sums(q: torch.Tensor, k: torch.Tensor, dk: torch.Tensor | None, layout, split):
    """(total, past, distance) of one chunk of heads; ``q`` float64, scaled, owned here."""
    sinks, d0, band = layout.sink_keys, layout.diag_offset, layout.band
    n = q.shape[1]
    k = _fitted_keys(k, sinks)
    k_sum = k.cumsum(1)
    rows = _row_dot(q, _shift_rows(k_sum, d0) - _shift_rows(k_sum, band))
    del k_sum
    q_sum = q.flip(1).cumsum(1).flip(1)  # Σ_{i ≥ m} q_i
    q_band = _band_sums(q_sum, d0, band)
    squares = _row_squares(q, k, d0, band)  # [h, n], per query row
    fk, fq = _spectrum(k), _spectrum(q)
    total = RawSums(_correlation(fq, fk, n, d0, band), rows, _row_dot(k, q_band), squares.sum(-1))
    distance = None
    if dk is not None:
        dk = _fitted_keys(dk, sinks)
        distance = (_correlation(fq, _spectrum(dk), n, d0, band), _row_dot(dk, q_band))
    del fq, q_band
    if split is None:
        return total, None, distance
    q_sum[:, :split] = q_sum[:, split : split + 1]  # Σ_{i ≥ max(m, C)} q_i
    q[:, :split] = 0.0
    past = RawSums(
        _correlation(_spectrum(q), fk, n, d0, band),
        rows * (torch.arange(n, device=q.device) >= split),
        _row_dot(k, _band_sums(q_sum, d0, band)),
        squares[:, split:].sum(-1),
    )
    return total, past, distance


def _fitted_keys(k: torch.Tensor, sinks: int) -> torch.Tensor:
    """A contiguous float64 copy of ``k`` [..., n, d] with the sink keys (not fitted) at 0
    (contiguous: the model hands over transposed views, and sums along a strided
    dimension cost several times more)."""
    k = k.to(torch.float64, copy=True, memory_format=torch.contiguous_format)
    k[..., :sinks, :] = 0.0
    return k


def _row_dot(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """[..., n]: a_i · b_i for [..., n, d] ``a``, ``b`` (broadcast)."""
    return (a * b).sum(-1)


def _band_sums(q_sum: torch.Tensor, d0: int, band: int) -> torch.Tensor:
    """Σ_{j+d₀ ≤ i < j+W'} q_i at key j, from the suffix sums ``q_sum`` [h, n, d]."""
    return _shift_rows(q_sum, -d0) - _shift_rows(q_sum, -band)


def _shift_rows(x: torch.Tensor, t: int) -> torch.Tensor | float:
    """out[..., m, :] = x[..., m − t, :] (0 out of range), positions along dim −2 of ``x``
    ([P, n, d], or [K, g, n, d]); 0.0 when |t| ≥ n."""
    if t == 0:
        return x
    if abs(t) >= x.shape[-2]:  # the causal edge of the band: nothing in range
        return 0.0
    out = torch.zeros_like(x)
    if t > 0:
        out[..., t:, :] = x[..., :-t, :]
    else:
        out[..., :t, :] = x[..., -t:, :]
    return out


def _spectrum(x: torch.Tensor) -> torch.Tensor:
    """rfft along positions (dim −2) of ``x`` [..., n, d], zero-padded to 2n (no
    wrap-around): [..., d, n + 1] complex128 (transposed first: a transform along the last,
    contiguous dimension costs a third of one along dim −2)."""
    return torch.fft.rfft(x.transpose(-1, -2).contiguous(), n=2 * x.shape[-2])


def _correlation(fq: torch.Tensor, fk: torch.Tensor, n: int, d0: int, band: int) -> torch.Tensor:
    """c[p, t] = Σ_i q[p, i]·k[p, i − t] for d₀ ≤ t < W' (k = 0 before 0; 0 elsewhere),
    [..., n] float64, from the spectra of q and k (broadcast against each other)."""
    diag = torch.fft.irfft(torch.linalg.vecdot(fk, fq, dim=-2), n=2 * n)[..., :n]
    diag[..., :d0] = 0.0
    diag[..., band:] = 0.0
    return diag


def _row_squares(q: torch.Tensor, k: torch.Tensor, d0: int, band: int) -> torch.Tensor:
    """sq[p, i] = Σ_{i−W' < j ≤ i − d₀} (q_i·k_j)², [P, n], in blocks of ``SQUARE_BLOCK`` rows
    (module doc); ``band`` W' ≤ n."""
    p, n, d = q.shape
    out = torch.zeros(p, n, dtype=q.dtype, device=q.device)
    seen = torch.zeros(p, d, d, dtype=q.dtype, device=q.device)  # Σ_{low ≤ j < s} k_j k_jᵀ
    low = 0  # keys below low have left the band of every later row
    for start in range(0, n, SQUARE_BLOCK):
        stop = min(start + SQUARE_BLOCK, n)
        shared = min(max(0, stop - band), start)  # keys shared ≤ j < start: seen by every row
        if shared > low:  # keys that left the band
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
