"""The sums of the fit accumulated a block of query rows at a time: never n × n for all heads.

For one layer, the logits W [P, n, n] (P heads) are produced a block of query rows
i ∈ [s, e) at a time, against keys j < e only (every fitted entry is causal, j ≤ i), by a
``BlockSource`` (``LayerCapture.logit_block`` or ``DistanceMap.block``). Each block
[P, e − s, e], minus a per-head shift and zeroed outside the fitted entries F, adds to

    diag[p, d] = Σ_{(i, i−d) ∈ F} W,  rows[p, i] = Σ_j W,  cols[p, j] = Σ_i W,  sumsq[p] = Σ W²

(float32 reductions within a block, float64 across blocks), the same sums as
:func:`posgen.harness.additive_fit.logit_fit.head_sums`. Extra memory: about three blocks,
O(P × rows × n), with ``rows = BLOCK_ELEMENTS // (P n)``.

Diagonal sums of a block: its rows go into a buffer [P, r, 2m] (m = e), each led by m zeros;
entry (t, u) of the strided view with row stride 2m + 1, offset s + 1, reads
W[s + t, s + t − (m − 1 − u)], i.e. distance d = m − 1 − u (zeros where j < 0).
"""

from __future__ import annotations

from collections.abc import Callable

import torch

from posgen.harness.additive_fit.logit_fit import HeadSums, RawSums, centred_sums

BLOCK_ELEMENTS = 2**23  # float32 elements of one block of logits (32 MiB)
SAMPLE_ROWS = 16  # query rows of the rough per-head mean

BlockSource = Callable[[int, int, int], torch.Tensor]  # (start, stop, width) -> [P, r, width]


def block_rows(heads: int, n: int) -> int:
    """Query rows per block: about ``BLOCK_ELEMENTS`` logits for all heads."""
    return max(1, min(n, BLOCK_ELEMENTS // max(heads * n, 1)))


def streamed_head_sums(source: BlockSource, heads: int, layout) -> HeadSums:
    """``HeadSums`` of the logits that ``source`` yields, block by block (module doc)."""
    return split_head_sums(source, heads, layout, None)[0]


def split_head_sums(source: BlockSource, heads: int, layout, split: int | None):
    """(``HeadSums``, shift [P], raw sums of rows < ``split``, of rows ≥ ``split``); without a
    split (None, or not inside 1..n−1) the last two are None."""
    shift = _rough_mean(source, layout)  # [P] float64, keeps float32 sums exact enough
    n = layout.n
    if split is None or not 0 < split < n:
        total = _accumulate(source, heads, layout, shift, (0, n), squares=True)
        before = past = None
    else:
        before = _accumulate(source, heads, layout, shift, (0, split), squares=True)
        past = _accumulate(source, heads, layout, shift, (split, n), squares=True)
        total = before + past
    return centred_sums(*total, shift, layout), shift, before, past


def streamed_diagonal_and_column_sums(source: BlockSource, heads: int, layout):
    """Raw (diagonal, column) sums over F of the map ``source`` yields: [P, n] float64 each."""
    raw = _accumulate(source, heads, layout, None, (0, layout.n), squares=False)
    return raw.diag, raw.cols


def _accumulate(source: BlockSource, heads: int, layout, shift, rows_range, squares: bool):
    """``RawSums`` of query rows rows_range[0]..rows_range[1]−1, a block at a time."""
    n = layout.n
    dev = layout.count_d.device
    diag = torch.zeros(heads, n, dtype=torch.float64, device=dev)
    rows = torch.zeros_like(diag)
    cols = torch.zeros_like(diag)
    sumsq = torch.zeros(heads, dtype=torch.float64, device=dev)
    step = block_rows(heads, n)
    for start in range(rows_range[0], rows_range[1], step):
        stop = min(start + step, rows_range[1])
        buf = torch.empty(heads, stop - start, 2 * stop, dtype=torch.float32, device=dev)
        buf[:, :, :stop] = 0.0
        x = buf[:, :, stop:]  # [P, r, m], m = stop
        if shift is None:
            x.copy_(source(start, stop, stop))
        else:
            torch.sub(source(start, stop, stop), shift.float()[:, None, None], out=x)
        x.mul_(layout.block_mask(start, stop)[:, :stop])
        diag[:, :stop] += _block_diagonal_sums(buf, start).double()
        cols[:, :stop] += x.sum(-2).double()
        if squares:
            rows[:, start:stop] = x.sum(-1).double()
            sumsq += (torch.linalg.vector_norm(x, dim=(-2, -1)).double()) ** 2
    return RawSums(diag, rows, cols, sumsq)


def _block_diagonal_sums(buf: torch.Tensor, start: int) -> torch.Tensor:
    """[P, m] sums along distance d = 0..m−1 of the block in ``buf`` [P, r, 2m] (module doc)."""
    p, r, width = buf.shape
    m = width // 2
    view = buf.as_strided(
        (p, r, m), (buf.stride(0), width + 1, 1), storage_offset=buf.storage_offset() + start + 1
    )
    return view.sum(-2).flip(-1)


def _rough_mean(source: BlockSource, layout) -> torch.Tensor:
    """[P] float64 mean of W over the fitted entries of about ``SAMPLE_ROWS`` query rows."""
    used = torch.nonzero(layout.count_i > 0)[:, 0]
    spots = torch.linspace(0, len(used) - 1, min(SAMPLE_ROWS, len(used)))
    total, count = 0.0, 0
    for i in used[spots.round().long()].tolist():
        mask = layout.block_mask(i, i + 1)[:, : i + 1]  # [1, i + 1]
        total = total + torch.where(mask, source(i, i + 1, i + 1).double(), 0.0).sum((-1, -2))
        count += int(mask.sum())
    return (total / count).float().double()  # representable in the float32 sums
