"""Sums of W = q kᵀ from q and k alone (prefix sums, FFT, blocked squares) against brute force."""

from __future__ import annotations

import pytest
import torch

from posgen.harness.additive_fit.causal_layout import CausalLayout
from posgen.harness.decomposition import qk_sums
from posgen.harness.decomposition.qk_sums import causal_qk_sums


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
