"""The distance + key form against a brute-force computation on explicit maps (no model)."""

from __future__ import annotations

import pytest
import torch

from posgen.harness.additive_fit.logit_fit import (
    FitLayout,
    FitOptions,
    diagonal_and_column_sums,
    head_sums,
)
from posgen.harness.decomposition.qk_pattern import DistanceMap, distance_key_r, distance_sums


def _brute_distance_key_r(w: torch.Tensor, d: torch.Tensor, mask: torch.Tensor) -> float:
    """Pearson r of W against â[i−j] + ĉ[j] over the mask, by explicit loops."""
    n = mask.shape[0]
    i, j = torch.nonzero(mask, as_tuple=True)
    dist = i - j
    w, d = w.double(), d.double()
    a_hat = torch.zeros(n, dtype=torch.float64)
    c_hat = torch.zeros(n, dtype=torch.float64)
    for k in range(n):
        on_d, on_j = dist == k, j == k
        if on_d.any():
            a_hat[k] = d[i[on_d], j[on_d]].mean()
        if on_j.any():
            c_hat[k] = (w - d)[i[on_j], j[on_j]].mean()
    pred = a_hat[dist] + c_hat[j]
    return torch.corrcoef(torch.stack([pred, w[i, j]]))[0, 1].item()


@pytest.mark.parametrize(
    "options,window", [(FitOptions(), None), (FitOptions(include_diagonal=False, sink_keys=3), 7)]
)
def test_distance_key_r_matches_brute_force(options, window):
    n, p, dim = 24, 5, 8
    gen = torch.Generator().manual_seed(2)
    query = torch.randn(p, n, dim, generator=gen)
    keys = torch.randn(p, n, dim, generator=gen)  # stands for R(j)k̄ at each position
    d_map = DistanceMap(query, keys, scaling=0.35)
    dense = torch.empty(p, n, n)
    d_map.fill(dense, slice(0, p))
    torch.testing.assert_close(dense, query @ keys.transpose(-1, -2) * 0.35)
    w = dense + torch.randn(p, n, n, generator=gen) + 2.0  # key part and an offset
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    if window is not None:
        idx = torch.arange(n)
        causal &= (idx[:, None] - idx[None, :]) < window
    mask = options.apply(causal)
    layout = FitLayout.from_mask(mask)
    # the map written chunk by chunk into the summing buffer equals the dense map's sums
    for got, want in zip(
        distance_sums(d_map, layout), diagonal_and_column_sums(dense, layout), strict=True
    ):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-4)
    r = distance_key_r(head_sums(w, layout), distance_sums(d_map, layout), layout)
    for h in range(p):
        assert r[h].item() == pytest.approx(_brute_distance_key_r(w[h], dense[h], mask), abs=1e-6)
