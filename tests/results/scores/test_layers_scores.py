"""Per-layer sensitivity scores and the within-model relation test (unit tier)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from posgen.results.scores.layers import (
    additivity,
    change_test,
    degradation_row,
    mirror_windows,
    naive_spearman_p,
    relation,
    shift_test,
)


def test_mirror_windows_read_the_profile_forward_and_backward_without_jumps():
    ring = np.concatenate([np.arange(5), np.arange(5)[::-1]])
    windows = ring[mirror_windows(5)]
    assert windows.shape == (10, 5)
    assert list(windows[0]) == [0, 1, 2, 3, 4] and list(windows[5]) == [4, 3, 2, 1, 0]
    assert np.abs(np.diff(windows, axis=1)).max() <= 1  # neighbours stay neighbours


def test_a_planted_monotone_relation_is_found():
    s = np.arange(30.0)
    out = shift_test(s, s**2)
    assert out["rho"] == pytest.approx(1.0)
    # the identity and its mirror (ρ = -1) are the only moves as extreme
    assert out["p"] == pytest.approx(2 / 60)
    assert out["null_size"] == 60


def test_a_relation_no_other_move_matches_gets_the_smallest_p():
    s = np.array([0, 5, 1, 7, 2, 9, 3, 8, 4, 6, 11, 10], dtype=float)
    out = shift_test(s, s)
    assert out["rho"] == pytest.approx(1.0) and out["p"] == pytest.approx(1 / 24)


def test_a_shuffled_covariate_is_not_significant_on_average():
    rng = np.random.default_rng(0)
    ps = [shift_test(rng.normal(size=30), rng.normal(size=30))["p"] for _ in range(300)]
    assert 0.4 < np.mean(ps) < 0.6  # p is uniform-ish under independence
    assert np.mean(np.array(ps) <= 0.05) <= 0.08


def test_nan_layers_are_dropped_and_too_few_give_nan():
    out = shift_test([1, 2, 3, 4, 5, math.nan], [2, 1, 4, 3, 5, 0])
    assert out["n_layers"] == 5
    assert math.isnan(shift_test([1, 2, 3], [1, 2, 3])["p"])
    assert math.isnan(shift_test([1, 1, 1, 1], [1, 2, 3, 4])["rho"])


def test_the_changes_test_ignores_a_shared_trend():
    rng = np.random.default_rng(1)
    depth = np.arange(30.0)
    s, q = depth + rng.normal(size=30), depth + rng.normal(size=30)
    assert naive_spearman_p(s, q) < 1e-6  # independence p: the trend reads as association
    assert change_test(s, q)["p"] > 0.05
    assert change_test(s, q)["n_layers"] == 29


def test_relation_reports_the_naive_p_beside_the_shift_p():
    (row,) = relation(np.arange(10.0), {"fit_r": np.arange(10.0)})
    assert row["covariate"] == "fit_r" and row["p"] == pytest.approx(2 / 20)
    assert row["naive_p"] < 1e-6  # what treating layers as independent would claim


def test_degradation_matches_the_ratio_of_perplexities():
    words = [100.0, 120.0, 80.0]
    bll, pll = [-300.0, -360.0, -250.0], [-330.0, -380.0, -270.0]
    row = degradation_row(bll, pll, words)
    expected = math.exp((980 - 910) / 300) - 1  # PPL ratio over the same words
    assert row["degradation"] == pytest.approx(expected)
    assert row["sensitivity"] == pytest.approx(math.log1p(expected))
    assert row["ci_lo"] < row["degradation"] < row["ci_hi"]


def test_additivity_compares_the_sum_with_the_all_layer_effect():
    rows = [{"cell": "0", "sensitivity": 0.1}, {"cell": "1", "sensitivity": 0.2}]
    out = additivity([*rows, {"cell": "all", "sensitivity": 0.6}])
    assert out["sum_of_layers"] == pytest.approx(0.3) and out["ratio"] == pytest.approx(0.5)
    assert math.isnan(additivity(rows)["ratio"])
