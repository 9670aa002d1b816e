"""The structured causal layout against the dense reference layout, and planted truth at n ≥ 4096."""

from __future__ import annotations

import pytest
import torch

from logit_fit_reference import reference_fit
from posgen.harness.additive_fit.causal_layout import CausalLayout
from posgen.harness.additive_fit.fit_layout import band_mask
from posgen.harness.additive_fit.logit_fit import (
    FitLayout,
    FitOptions,
    LayoutCache,
    fit_sums,
    head_sums,
)
from posgen.harness.decomposition.qk_pattern import distance_key_r, distance_sums

pytestmark = pytest.mark.heavy


def _logits(n: int, heads: int, gen: torch.Generator, noise: float = 1.0) -> torch.Tensor:
    """Heads with planted a, b, c of varying strength plus Gaussian noise, [P, n, n] float64."""
    a, b, c = (torch.randn(heads, n, generator=gen, dtype=torch.float64) for _ in range(3))
    i = torch.arange(n)
    dist = (i[:, None] - i[None, :]).clamp(min=0)
    scale = torch.linspace(0.0, 2.0, heads, dtype=torch.float64)[:, None, None]
    noise_part = noise * torch.randn(heads, n, n, generator=gen, dtype=torch.float64)
    return scale * (a[:, dist] + b[:, :, None] + c[:, None, :]) + noise_part


CASES = [
    (64, FitOptions()),
    (64, FitOptions(include_diagonal=False, sink_keys=3)),
    (257, FitOptions(include_diagonal=False)),
    (257, FitOptions(sink_keys=4)),
    (1024, FitOptions()),
]


@pytest.mark.parametrize("n,options", CASES)
def test_agrees_with_the_dense_layout_on_every_form(n, options):
    gen = torch.Generator().manual_seed(n + options.sink_keys)
    w = _logits(n, 4, gen)
    dense = FitLayout.from_mask(options.apply(torch.ones(n, n, dtype=torch.bool)))
    fast = CausalLayout(n, options.sink_keys, options.include_diagonal)
    assert (fast.rank3, fast.rank2, fast.n_entries) == (dense.rank3, dense.rank2, dense.n_entries)
    for name in ("count_d", "count_i", "count_j"):
        torch.testing.assert_close(getattr(fast, name), getattr(dense, name), rtol=0, atol=0)
    assert torch.equal(fast.mask, dense.mask)
    sums = head_sums(w, dense)
    ref, got = fit_sums(sums, dense), fit_sums(sums, fast)
    for name in ("r_3axis", "r_2axis", "r_row_centred"):
        torch.testing.assert_close(getattr(got, name), getattr(ref, name), rtol=0, atol=1e-8)
    torch.testing.assert_close(got.residual_std, ref.residual_std, rtol=1e-7, atol=0)
    d_map = w * torch.linspace(0.5, 1.5, n, dtype=torch.float64)  # any D map: the same sums
    d_sums = distance_sums(d_map, dense)
    r_dk = distance_key_r(sums, d_sums, fast)
    torch.testing.assert_close(r_dk, distance_key_r(sums, d_sums, dense), rtol=0, atol=1e-8)
    fitted_ref = _fitted(ref, dense)
    torch.testing.assert_close(_fitted(got, fast), fitted_ref, rtol=0, atol=1e-6)


def test_agrees_with_the_sparse_least_squares_reference():
    n, options = 257, FitOptions(include_diagonal=False, sink_keys=2)
    w = _logits(n, 2, torch.Generator().manual_seed(5))
    layout = CausalLayout(n, options.sink_keys, options.include_diagonal)
    fits = fit_sums(head_sums(w, layout), layout)
    for head in range(2):
        for two_axis, got in ((False, fits.r_3axis), (True, fits.r_2axis)):
            ref = reference_fit(w[head].numpy(), layout.mask.numpy(), two_axis=two_axis)
            assert abs(ref["r"] - float(got[head])) < 1e-12


def _fitted(fits, layout) -> torch.Tensor:
    n = layout.n
    i = torch.arange(n)
    dist = (i[:, None] - i[None, :]).clamp(min=0)
    full = torch.nan_to_num(fits.a)[:, dist] + torch.nan_to_num(fits.b)[:, :, None]
    return (full + torch.nan_to_num(fits.c)[:, None, :])[:, layout.mask]


def test_planted_truth_is_recovered_within_noise_at_4096():
    n, sigma = 4096, 0.5
    gen = torch.Generator().manual_seed(7)
    a = torch.sin(torch.arange(n, dtype=torch.float64) / 300) * 2
    b, c = (torch.randn(n, generator=gen, dtype=torch.float64) for _ in range(2))
    layout = LayoutCache().causal(n, FitOptions())
    assert isinstance(layout, CausalLayout)
    i = torch.arange(n)
    w = a[(i[:, None] - i[None, :]).clamp(min=0)] + b[:, None] + c[None, :]
    w.add_(sigma * torch.randn(n, n, generator=gen, dtype=torch.float64))
    w = w.float()[None]
    fits = fit_sums(head_sums(w, layout), layout)
    del w
    # a[d] is identified up to a constant and a linear trend (the null space of G); on the
    # distances seen by ≥ n/2 entries its standard error is ≤ σ·sqrt(2/n) (plus b, c noise)
    d = torch.arange(n // 2, dtype=torch.float64)
    err = fits.a[0, : n // 2] - a[: n // 2]
    design = torch.stack([torch.ones_like(d), d], dim=1)
    err = err - design @ torch.linalg.lstsq(design, err[:, None]).solution[:, 0]
    assert float(err.abs().max()) < 6 * sigma * (2 / n) ** 0.5
    for fitted, true in ((fits.b[0], b), (fits.c[0, : n // 2], c[: n // 2])):
        assert torch.corrcoef(torch.stack([fitted, true]))[0, 1] > 0.99
    signal = torch.var(a[(i[:, None] - i[None, :]).clamp(min=0)][layout.mask]) + 2.0
    expected_r = float((signal / (signal + sigma**2)).sqrt())
    assert abs(float(fits.r_3axis[0]) - expected_r) < 0.01
    assert abs(float(fits.residual_std[0]) - sigma) < 0.01


def test_cache_picks_the_structured_layout_only_where_it_applies():
    cache = LayoutCache()
    assert isinstance(cache.causal(64, FitOptions(sink_keys=2)), CausalLayout)
    assert cache.causal(64, FitOptions(sink_keys=2)) is cache.causal(64, FitOptions(sink_keys=2))
    tiny = cache.causal(3, FitOptions(include_diagonal=False))  # two query rows with entries
    assert isinstance(tiny, FitLayout)
    with pytest.raises(ValueError, match="3 query rows"):
        CausalLayout(3, 0, include_diagonal=False)


def test_sums_off_the_range_are_projected_and_bad_sums_raise():
    n = 128
    layout = CausalLayout(n)
    gen = torch.Generator().manual_seed(3)
    sums = head_sums(_logits(n, 2, gen), layout)
    base = fit_sums(sums, layout).r_3axis
    sums.diag += 1e3 * layout.used_d  # along a null vector of G: projected out
    sums.rows -= 1e3 * layout.used_i
    torch.testing.assert_close(fit_sums(sums, layout).r_3axis, base, rtol=0, atol=1e-10)
    sums.diag[0, 5] = float("nan")
    with pytest.raises(ValueError, match="not finite"):
        fit_sums(sums, layout)


def test_row_moments_match_brute_force():
    gen = torch.Generator().manual_seed(11)
    for n, k, diag, first in ((20, 0, True, 7), (20, 3, False, 9), (17, 2, True, 0)):
        layout = CausalLayout(n, k, diag)
        a, b, c = (torch.randn(2, n, generator=gen, dtype=torch.float64) for _ in range(3))
        i = torch.arange(n)
        f = a[:, (i[:, None] - i[None, :]).clamp(min=0)] + b[:, :, None] + c[:, None, :]
        rows = layout.mask.clone()
        rows[:first] = False
        total, squares, count = layout.row_moments(a, b, c, first)
        torch.testing.assert_close(total, (f * rows).sum((1, 2)), rtol=0, atol=1e-10)
        torch.testing.assert_close(squares, (f**2 * rows).sum((1, 2)), rtol=0, atol=1e-10)
        assert count == int(rows.sum())


BAND_CASES = [
    (64, 10, FitOptions()),
    (64, 7, FitOptions(include_diagonal=False, sink_keys=3)),
    (64, 3, FitOptions()),  # three distances, at most three entries a row
    (257, 100, FitOptions(include_diagonal=False)),
    (257, 33, FitOptions(sink_keys=4)),
    (1024, 300, FitOptions()),
]


@pytest.mark.parametrize("n,window,options", BAND_CASES)
def test_band_agrees_with_the_dense_layout_on_every_form(n, window, options):
    gen = torch.Generator().manual_seed(n + window)
    w = _logits(n, 4, gen)
    dense = FitLayout.from_mask(options.apply(band_mask(n, window)))
    fast = CausalLayout(n, options.sink_keys, options.include_diagonal, window=window)
    assert fast.is_band and fast.description == f"band:{window}"
    assert (fast.rank3, fast.rank2, fast.n_entries) == (dense.rank3, dense.rank2, dense.n_entries)
    for name in ("count_d", "count_i", "count_j"):
        torch.testing.assert_close(getattr(fast, name), getattr(dense, name), rtol=0, atol=0)
    assert torch.equal(fast.mask, dense.mask)
    sums = head_sums(w, dense)
    ref, got = fit_sums(sums, dense), fit_sums(sums, fast)
    for name in ("r_3axis", "r_2axis", "r_row_centred"):
        torch.testing.assert_close(getattr(got, name), getattr(ref, name), rtol=0, atol=1e-8)
    torch.testing.assert_close(got.residual_std, ref.residual_std, rtol=1e-7, atol=0)
    d_map = w * torch.linspace(0.5, 1.5, n, dtype=torch.float64)
    d_sums = distance_sums(d_map, dense)
    r_dk = distance_key_r(sums, d_sums, fast)
    torch.testing.assert_close(r_dk, distance_key_r(sums, d_sums, dense), rtol=0, atol=1e-8)
    torch.testing.assert_close(_fitted(got, fast), _fitted(ref, dense), rtol=0, atol=1e-6)


def test_a_band_at_least_n_wide_is_the_causal_layout():
    cache = LayoutCache()
    wide = cache.causal(64, FitOptions(), window=64)
    assert wide is cache.causal(64, FitOptions()) and not wide.is_band
    assert CausalLayout(64, window=100).description == "causal"
    assert isinstance(cache.causal(64, FitOptions(include_diagonal=False), window=2), FitLayout)
    with pytest.raises(ValueError, match="2 fitted distances"):
        CausalLayout(64, include_diagonal=False, window=2)  # one distance: not identified
    with pytest.raises(ValueError, match="window must be >= 1"):
        CausalLayout(64, window=0)


def test_planted_truth_on_a_band_is_recovered_within_noise_at_4096():
    n, window, sigma = 4096, 512, 0.5
    gen = torch.Generator().manual_seed(8)
    a = torch.sin(torch.arange(n, dtype=torch.float64) / 60) * 2
    b, c = (torch.randn(n, generator=gen, dtype=torch.float64) for _ in range(2))
    layout = LayoutCache().causal(n, FitOptions(), window=window)
    assert isinstance(layout, CausalLayout) and layout.is_band
    i = torch.arange(n)
    w = a[(i[:, None] - i[None, :]).clamp(min=0)] + b[:, None] + c[None, :]
    w.add_(sigma * torch.randn(n, n, generator=gen, dtype=torch.float64))
    w = w.float()[None]
    fits = fit_sums(head_sums(w, layout), layout)
    del w
    # every distance d < W has n − d ≥ n − W entries: standard error ≤ σ·sqrt(1/(n − W))
    d = torch.arange(window, dtype=torch.float64)
    err = fits.a[0, :window] - a[:window]
    design = torch.stack([torch.ones_like(d), d], dim=1)
    err = err - design @ torch.linalg.lstsq(design, err[:, None]).solution[:, 0]
    assert float(err.abs().max()) < 6 * sigma * (1 / (n - window)) ** 0.5
    assert torch.isnan(fits.a[0, window:]).all()  # distances past the band are not fitted
    for fitted, true in ((fits.b[0], b), (fits.c[0], c)):
        assert torch.corrcoef(torch.stack([fitted, true]))[0, 1] > 0.98
    signal = torch.var(a[(i[:, None] - i[None, :]).clamp(min=0)][layout.mask]) + 2.0
    expected_r = float((signal / (signal + sigma**2)).sqrt())
    assert abs(float(fits.r_3axis[0]) - expected_r) < 0.01
    assert abs(float(fits.residual_std[0]) - sigma) < 0.01


def test_band_row_moments_match_brute_force():
    gen = torch.Generator().manual_seed(12)
    for n, k, diag, first, window in (
        (20, 0, True, 7, 5),
        (20, 3, False, 9, 4),
        (17, 2, True, 0, 9),
    ):
        layout = CausalLayout(n, k, diag, window=window)
        a, b, c = (torch.randn(2, n, generator=gen, dtype=torch.float64) for _ in range(3))
        i = torch.arange(n)
        f = a[:, (i[:, None] - i[None, :]).clamp(min=0)] + b[:, :, None] + c[:, None, :]
        rows = layout.mask.clone()
        rows[:first] = False
        total, squares, count = layout.row_moments(a, b, c, first)
        torch.testing.assert_close(total, (f * rows).sum((1, 2)), rtol=0, atol=1e-10)
        torch.testing.assert_close(squares, (f**2 * rows).sum((1, 2)), rtol=0, atol=1e-10)
        assert count == int(rows.sum())


@pytest.mark.parametrize("window", [None, 40])
def test_heads_solved_in_batches_equal_one_batch(monkeypatch, window):
    """Each head's CG is its own: batches of one head give the fit of all heads at once."""
    from posgen.harness.additive_fit import causal_layout

    n = 96
    w = _logits(n, 5, torch.Generator().manual_seed(11))
    fast = CausalLayout(n, window=window)
    sums = head_sums(w, FitLayout.from_mask(band_mask(n, window or n)))
    whole = fit_sums(sums, fast)
    monkeypatch.setattr(causal_layout, "SOLVE_CHUNK_BYTES", 3 * n * 8)  # one head per batch
    batched = fit_sums(sums, fast)
    for name in ("r_3axis", "r_2axis", "r_row_centred", "a", "b", "c"):
        torch.testing.assert_close(
            getattr(batched, name), getattr(whole, name), rtol=0, atol=1e-9, equal_nan=True
        )
