"""r before and past the trained context, and the trend of a[d], against brute force."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posgen.harness.additive_fit.causal_layout import CausalLayout
from posgen.harness.additive_fit.logit_fit import fit_sums
from posgen.harness.decomposition.block_sums import split_head_sums
from posgen.harness.decomposition.past_context import a_trend, past_context_figures


@pytest.mark.parametrize("window", [None, 25])  # causal, and Λ's local band
def test_split_r_matches_brute_force_pearson_per_region(window):
    n, context, heads = 60, 40, 3
    gen = torch.Generator().manual_seed(2)
    i = torch.arange(n)
    dist = (i[:, None] - i[None, :]).clamp(min=0)
    a, b, c = (torch.randn(heads, n, generator=gen, dtype=torch.float64) for _ in range(3))
    w = 20 + a[:, dist] + b[:, :, None] + c[:, None, :]
    noise = torch.randn(heads, n, n, generator=gen, dtype=torch.float64)
    w = (w + noise * (i[:, None] >= context) * torch.tensor([0.1, 1.0, 3.0])[:, None, None]).float()
    layout = CausalLayout(n, sink_keys=1, include_diagonal=False, window=window)

    def source(start, stop, width):
        return w[:, start:stop, :width].clone()

    sums, shift, before, past = split_head_sums(source, heads, layout, context)
    fits = fit_sums(sums, layout)
    got = past_context_figures(fits, shift, before, past, layout, context)
    f = (
        fits.a[:, dist].nan_to_num()
        + fits.b.nan_to_num()[:, :, None]
        + fits.c.nan_to_num()[:, None, :]
    )
    for key, rows in (
        ("r_3axis_before_context", i < context),
        ("r_3axis_past_context", i >= context),
    ):
        region = layout.mask & rows[:, None]
        for p in range(heads):
            ref = np.corrcoef(f[p][region].numpy(), w[p][region].double().numpy())[0, 1]
            assert abs(float(got[key][p]) - ref) < 1e-6, (key, p)
    assert (got["r_3axis_before_context"] > got["r_3axis_past_context"]).all()  # noise past C
    assert (got["r_3axis_past_context"].diff() < 0).all()  # more noise, lower r


def test_a_trend_is_blind_to_the_null_space_and_sees_a_break():
    n, context = 64, 32
    d = torch.arange(n, dtype=torch.float64)
    counts = n - d
    smooth = (0.5 * d + 3.0)[None]  # a straight line: no deviation anywhere
    broken = smooth + torch.where(d >= context, 2.0, 0.0)
    before, past = a_trend(torch.cat([smooth, broken]), counts, context)
    torch.testing.assert_close(before, torch.zeros(2, dtype=torch.float64), rtol=0, atol=1e-9)
    assert past[0] < 1e-9 and abs(float(past[1]) - 2.0) < 1e-9


def test_a_trend_is_nan_without_distances_to_fit():
    n, context = 64, 32
    counts = torch.where(torch.arange(n) < 12, 64.0 - torch.arange(n), 0.0).double()  # W = 12
    before, past = a_trend(torch.randn(2, n, dtype=torch.float64), counts, context)
    assert torch.isnan(before).all() and torch.isnan(past).all()
