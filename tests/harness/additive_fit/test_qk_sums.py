"""Sums of W = q kᵀ from q and k alone (prefix sums, FFT, blocked squares) against brute force."""

from __future__ import annotations

import pytest
import torch

from posgen.harness.additive_fit import qk_sums
from posgen.harness.additive_fit.causal_layout import CausalLayout
from posgen.harness.additive_fit.qk_sums import causal_qk_sums, layer_qk_sums


@pytest.mark.parametrize(
    "sinks,diagonal,first_row,window",
    [
        (0, True, 0, None),
        (3, False, 0, None),
        (2, True, 70, None),
        (0, False, 33, None),
        # Λ's local band: narrower than a block, a block and a half, wider than most rows
        (0, True, 0, 5),
        (3, False, 0, 24),
        (2, True, 70, 24),
        (0, False, 33, 61),
        (0, True, 50, 16),
    ],
)
def test_qk_sums_match_the_logit_map(monkeypatch, sinks, diagonal, first_row, window):
    monkeypatch.setattr(qk_sums, "SQUARE_BLOCK", 16)  # several blocks, one partial
    n = 100
    gen = torch.Generator().manual_seed(sinks + first_row + (window or 0))
    q = torch.randn(2, n, 8, generator=gen, dtype=torch.float64) + 0.3
    k = torch.randn(2, n, 8, generator=gen, dtype=torch.float64)
    layout = CausalLayout(n, sinks, diagonal, window=window)
    w = q @ k.transpose(1, 2)
    fitted = layout.mask.clone()
    fitted[:first_row] = False
    x = w * fitted
    diag = torch.stack([x.diagonal(-t, dim1=1, dim2=2).sum(-1) for t in range(n)], dim=1)
    got = causal_qk_sums(q, k, layout, first_row)
    expected = (diag, x.sum(-1), x.sum(-2), (x**2).sum((-1, -2)))
    for name, a, b in zip(("diag", "rows", "cols", "sumsq"), got, expected, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-10, msg=name)


@pytest.mark.parametrize(
    "sinks,diagonal,window", [(0, True, None), (2, False, None), (1, True, 24)]
)
def test_layer_sums_share_work_across_chunks_of_heads(monkeypatch, sinks, diagonal, window):
    """All rows, the rows past a split and the distance map's sums, a head per chunk, equal
    the brute-force sums of each map over its fitted entries."""
    monkeypatch.setattr(qk_sums, "SQUARE_BLOCK", 16)
    monkeypatch.setattr(qk_sums, "CHUNK_BYTES", 100 * 8 * 8)  # one head per chunk
    n, split, scaling = 100, 37, 0.3
    gen = torch.Generator().manual_seed(7 + sinks)
    q, k, dk = (torch.randn(3, n, 8, generator=gen) + 0.2 for _ in range(3))  # float32
    layout = CausalLayout(n, sinks, diagonal, window=window)
    got = layer_qk_sums(q, k, layout, scaling=scaling, split=split, distance_keys=dk)

    def brute(keys: torch.Tensor, first_row: int = 0) -> tuple[torch.Tensor, ...]:
        x = (q.double() * scaling) @ keys.double().transpose(1, 2)
        fitted = layout.mask.clone()
        fitted[:first_row] = False
        x = x * fitted
        diag = torch.stack([x.diagonal(-t, dim1=1, dim2=2).sum(-1) for t in range(n)], dim=1)
        return diag, x.sum(-1), x.sum(-2), (x**2).sum((-1, -2))

    for part, expected in ((got.total, brute(k)), (got.past, brute(k, split))):
        for name, a, b in zip(("diag", "rows", "cols", "sumsq"), part, expected, strict=True):
            torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-9, msg=name)
    d_diag, _, d_cols, _ = brute(dk)
    torch.testing.assert_close(got.distance[0], d_diag, rtol=1e-12, atol=1e-9)
    torch.testing.assert_close(got.distance[1], d_cols, rtol=1e-12, atol=1e-9)
    with pytest.raises(ValueError, match="split must lie"):
        layer_qk_sums(q, k, layout, split=n)


@pytest.mark.parametrize(
    "sinks,diagonal,window", [(0, True, None), (2, False, None), (0, True, 24), (1, False, 7)]
)
def test_grouped_sums_and_the_fits_terms_match_the_logit_map(sinks, diagonal, window):
    """Six query heads on two key heads (head p reads key head p // 3), from transposed
    views as the model hands them over: the sums equal the logit map's, and the terms
    solved from them alone equal the full fit's."""
    from posgen.harness.additive_fit.logit_fit import fit_heads, fit_terms

    n, scaling = 100, 0.3
    gen = torch.Generator().manual_seed(11 + sinks)
    q = (torch.randn(n, 6, 8, generator=gen, dtype=torch.float64) + 0.2).transpose(0, 1)
    k = torch.randn(n, 2, 8, generator=gen).transpose(0, 1)  # a float32 view
    q_before = q.clone()
    layout = CausalLayout(n, sinks, diagonal, window=window)
    w = (q.double() * scaling) @ k.double().repeat_interleave(3, 0).transpose(1, 2)
    x = w * layout.mask
    diag = torch.stack([x.diagonal(-t, dim1=1, dim2=2).sum(-1) for t in range(n)], dim=1)
    got = qk_sums.grouped_fit_sums(q, k, layout, scaling)
    for name, a, b in zip(("diag", "rows", "cols"), got, (diag, x.sum(-1), x.sum(-2)), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-12, atol=1e-9, msg=name)
    assert torch.equal(q, q_before)  # the caller's (float64) query is not scaled in place
    fits = fit_heads(w, layout)
    for name, a, b in zip("abc", fit_terms(*got, layout), (fits.a, fits.b, fits.c), strict=True):
        torch.testing.assert_close(a, b, rtol=1e-9, atol=1e-9, equal_nan=True, msg=name)
    with pytest.raises(ValueError, match="evenly"):
        qk_sums.grouped_fit_sums(q[:5], k, layout)
