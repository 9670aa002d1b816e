"""Unit tests of the exact logit fit (no model): reference solve, planted structure, null space."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
import torch

from logit_fit_reference import reference_fit
from posgen.harness.additive_fit.logit_fit import (
    FitLayout,
    FitOptions,
    HeadSums,
    LayoutCache,
    diagonal_sums,
    fit_heads,
    fit_sums,
    fitted_map,
    head_sums,
)


def _causal(n: int) -> torch.Tensor:
    return torch.ones(n, n, dtype=torch.bool).tril()


def _window(n: int, w: int) -> torch.Tensor:
    i = torch.arange(n)
    d = i[:, None] - i[None, :]
    return (d >= 0) & (d < w)


def _planted(n: int, gen: torch.Generator, p: int = 1):
    a, b, c = (torch.randn(p, n, generator=gen, dtype=torch.float64) for _ in range(3))
    i = torch.arange(n)
    dist = (i[:, None] - i[None, :]).clamp(min=0)
    return a[:, dist] + b[:, :, None] + c[:, None, :]


def test_diagonal_sums_match_brute_force():
    gen = torch.Generator().manual_seed(1)
    x = torch.randn(3, 17, 17, generator=gen, dtype=torch.float64).tril()
    brute = torch.stack(
        [torch.stack([x[p].diagonal(-d).sum() for d in range(17)]) for p in range(3)]
    )
    torch.testing.assert_close(diagonal_sums(x), brute, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    "options,mask_kind",
    [
        (FitOptions(), "causal"),
        (FitOptions(include_diagonal=False), "causal"),
        (FitOptions(sink_keys=4), "causal"),
        (FitOptions(include_diagonal=False, sink_keys=2), "window"),
    ],
)
@pytest.mark.parametrize("dtype", [torch.float64, torch.float32])
def test_agrees_with_scipy_lsqr_reference(options, mask_kind, dtype):
    n = 40
    mask = options.apply(_causal(n) if mask_kind == "causal" else _window(n, 9))
    gen = torch.Generator().manual_seed(7)
    logits = torch.randn(3, n, n, generator=gen) * 2 + 5  # offset: tests the centring
    logits += 0.5 * _planted(n, gen).float()
    layout = FitLayout.from_mask(mask)
    fits = fit_sums(head_sums(logits, layout, dtype=dtype), layout)
    for p in range(3):
        ref = reference_fit(logits[p].numpy(), mask.numpy())
        ref2 = reference_fit(logits[p].numpy(), mask.numpy(), two_axis=True)
        assert abs(fits.r_3axis[p].item() - ref["r"]) < 1e-6
        assert abs(fits.r_row_centred[p].item() - ref["r_row_centred"]) < 1e-6
        assert abs(fits.r_2axis[p].item() - ref2["r"]) < 1e-6
        fitted = fitted_map(fits, p, layout)[mask].numpy()
        if dtype == torch.float64:
            np.testing.assert_allclose(fitted, ref["fitted"], atol=1e-6)
        else:  # float32 sums: fitted values to ~1e-6 relative
            np.testing.assert_allclose(fitted, ref["fitted"], rtol=1e-5, atol=1e-5)


def test_float32_sums_survive_a_large_offset():
    """W − rough mean is what float32 sums: an offset of 1000 std costs no digits of r."""
    n = 128
    gen = torch.Generator().manual_seed(11)
    i = torch.arange(n, dtype=torch.float32)
    w = torch.randn(4, n, n, generator=gen) + 0.02 * i[:, None] + 0.5 * _planted(n, gen).float()
    layout = FitLayout.from_mask(_causal(n))
    for offset in (0.0, 50.0, 1000.0):
        x = w + offset
        f64 = fit_sums(head_sums(x, layout, dtype=torch.float64), layout)
        f32 = fit_sums(head_sums(x, layout, dtype=torch.float32), layout)
        for name in ("r_3axis", "r_2axis", "r_row_centred", "logit_std"):
            diff = (getattr(f32, name) - getattr(f64, name)).abs().max().item()
            assert diff < 1e-6, (offset, name, diff)


def test_fits_of_concatenated_sums_equal_separate_fits():
    n = 48
    gen = torch.Generator().manual_seed(5)
    layout = FitLayout.from_mask(FitOptions(sink_keys=2).apply(_causal(n)))
    x, y = torch.randn(3, n, n, generator=gen), torch.randn(2, n, n, generator=gen) + 3
    both = fit_sums(HeadSums.cat([head_sums(x, layout), head_sums(y, layout)]), layout)
    alone = [fit_heads(x, layout), fit_heads(y, layout)]
    for name in ("r_3axis", "r_2axis", "r_row_centred", "share_key", "a", "b", "c"):
        joined = torch.cat([getattr(f, name) for f in alone])
        torch.testing.assert_close(getattr(both, name), joined, equal_nan=True)


def test_planted_structure_is_recovered_exactly():
    n = 64
    gen = torch.Generator().manual_seed(3)
    w = _planted(n, gen, p=4)
    layout = FitLayout.from_mask(_causal(n))
    fits = fit_heads(w, layout)
    torch.testing.assert_close(fits.r_3axis, torch.ones(4, dtype=torch.float64))
    torch.testing.assert_close(fits.r_row_centred, torch.ones(4, dtype=torch.float64))
    assert fits.residual_std.max() < 1e-6
    for p in range(4):
        torch.testing.assert_close(fitted_map(fits, p, layout)[layout.mask], w[p][layout.mask])


def test_planted_structure_with_noise_gives_the_expected_r():
    n, sigma = 96, 1.0
    gen = torch.Generator().manual_seed(5)
    signal = _planted(n, gen, p=8)
    noise = sigma * torch.randn(8, n, n, generator=gen, dtype=torch.float64)
    layout = FitLayout.from_mask(_causal(n))
    fits = fit_heads(signal + noise, layout)
    m = layout.mask
    var_signal = torch.stack([signal[p][m].var() for p in range(8)])
    # OLS keeps the signal and a rank/N share of the noise variance
    keep = (layout.rank3 - 1) / (layout.n_entries - 1)
    expected = ((var_signal + keep * sigma**2) / (var_signal + sigma**2)).sqrt()
    assert (fits.r_3axis - expected).abs().max() < 0.02
    noise_only = fit_heads(noise, layout)
    assert abs(noise_only.r_3axis.mean().item() - layout.chance_r) < 0.02


def test_null_space_and_chance_level():
    n = 256
    layout = FitLayout.from_mask(_causal(n))
    assert layout.rank3 == 3 * n - 3  # two additive constants + the linear trend
    assert layout.rank2 == 2 * n - 1  # one additive constant
    assert 0.14 < layout.chance_r < 0.16
    # the linear trend direction leaves the fitted values unchanged
    i = torch.arange(n, dtype=torch.float64)
    dist = i[:, None] - i[None, :]
    assert torch.allclose((dist - i[:, None] + i[None, :])[layout.mask], torch.zeros(1).double())
    for null, k in ((layout.null3, 3), (layout.null2, 1)):  # orthonormal bases, as many
        assert null.shape[1] == k
        torch.testing.assert_close(null.T @ null, torch.eye(k, dtype=torch.float64))


@pytest.mark.parametrize("options", [FitOptions(), FitOptions(sink_keys=3)])
def test_sums_off_the_range_of_the_gram_matrix_are_projected(options):
    """Rounded sums lie a little outside the range of G; the fit must ignore that part.
    Here it is made large on purpose, along null vectors of G (three axes: the additive
    constants and the linear trend; two axes: the constant), on which no true s = Xᵀw has a
    component."""
    n = 60
    layout = FitLayout.from_mask(options.apply(_causal(n)))
    gen = torch.Generator().manual_seed(4)
    sums = head_sums(
        torch.randn(2, n, n, generator=gen) + 0.3 * _planted(n, gen, 2).float(), layout
    )
    pos = torch.arange(n, dtype=torch.float64)
    used = lambda w: (w > 0).double()  # noqa: E731
    ud, ui, uj = used(layout.count_d), used(layout.count_i), used(layout.count_j)
    three = dataclasses.replace(  # along G's null vectors (1, −1, 0), (1, 0, −1), (d, −i, j)
        sums,
        diag=sums.diag + 0.5 * ud + 0.01 * pos * ud,
        rows=sums.rows - 0.3 * ui - 0.01 * pos * ui,
        cols=sums.cols - 0.2 * uj + 0.01 * pos * uj,
    )
    two = dataclasses.replace(sums, diag=sums.diag + 0.5 * ud, cols=sums.cols - 0.5 * uj)
    a, b, c = fit_sums(sums, layout), fit_sums(three, layout), fit_sums(two, layout)
    for name in ("r_3axis", "r_row_centred", "share_distance", "share_key"):
        torch.testing.assert_close(getattr(a, name), getattr(b, name), rtol=0, atol=1e-9)
    torch.testing.assert_close(a.r_2axis, c.r_2axis, rtol=0, atol=1e-9)


def test_normalisation_and_term_shares():
    n = 50
    i = torch.arange(n)
    dist = (i[:, None] - i[None, :]).clamp(min=0).double()
    layout = FitLayout.from_mask(_causal(n))
    distance_only = torch.cos(dist / 3)[None]
    fits = fit_heads(distance_only, layout)
    assert fits.share_distance.item() > 0.999
    w = layout.count_j
    jc = i.double() - (i * w).sum() / w.sum()
    key = torch.sin(i.double() * 0.7)
    key -= (key * w).sum() / w.sum()
    key_no_trend = key - jc * (key * w * jc).sum() / (w * jc * jc).sum()
    fits = fit_heads(key_no_trend[None, None, :].expand(1, n, n), layout)
    assert fits.share_key.item() > 0.9999
    # a linear trend in the keys is attributed to distance (the stated normalisation)
    fits = fit_heads(key[None, None, :].expand(1, n, n), layout)
    assert 0.001 < fits.share_distance.item() < 0.1
    c = fits.c[0]
    assert abs((c * w).sum().item()) < 1e-8
    assert abs((c * w * jc).sum().item()) < 1e-6


def test_unfitted_parameters_are_nan_and_options_validate():
    n = 20
    layout = FitLayout.from_mask(FitOptions(include_diagonal=False, sink_keys=3).apply(_causal(n)))
    fits = fit_heads(torch.randn(2, n, n), layout)
    assert torch.isnan(fits.c[:, :3]).all() and torch.isnan(fits.a[:, 0]).all()
    assert torch.isfinite(fits.c[:, 3:-1]).all()
    with pytest.raises(ValueError, match="sink_keys"):
        FitOptions(sink_keys=-1)
    with pytest.raises(ValueError, match="causal"):
        FitLayout.from_mask(torch.ones(4, 4, dtype=torch.bool))


def test_layout_cache_reuses_layouts():
    cache = LayoutCache()
    a = cache.get(_causal(12))
    assert cache.get(_causal(12)) is a
    assert cache.get(_window(12, 4)) is not a and len(cache) == 2
