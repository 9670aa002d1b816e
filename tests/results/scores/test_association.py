"""Exact permutation correlation across models (unit tier)."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from scipy import stats

from posgen.results.scores.association import permutation_correlation


def test_exact_p_counts_pairings_at_least_as_extreme():
    x = np.array([0.1, 0.4, 0.2, 0.9, 0.5])
    y = np.array([1.0, 3.0, 2.5, 4.0, 2.0])
    res = permutation_correlation(x, y, "pearson")
    r = stats.pearsonr(x, y)[0]
    perms = [stats.pearsonr(x, y[list(p)])[0] for p in itertools.permutations(range(5))]
    want = np.mean(np.abs(perms) >= abs(r) - 1e-12)
    assert res["exact"] and res["pairings"] == 120
    assert res["r"] == pytest.approx(r) and res["p"] == pytest.approx(want)


def test_spearman_uses_average_ranks():
    x, y = [1, 2, 2, 3, 4], [10, 20, 30, 25, 40]
    res = permutation_correlation(x, y, "spearman")
    assert res["r"] == pytest.approx(stats.spearmanr(x, y).statistic)


def test_false_positive_rate_under_independence_is_at_most_alpha():
    rng = np.random.default_rng(0)
    for n in (4, 6, 9):
        hits = sum(
            permutation_correlation(rng.lognormal(size=n), rng.normal(size=n), seed=i)["p"] <= 0.05
            for i in range(300)
        )
        assert hits / 300 <= 0.05 + 2 * math.sqrt(0.05 * 0.95 / 300), (n, hits)


def test_large_n_uses_seeded_random_pairings():
    rng = np.random.default_rng(1)
    x = rng.normal(size=10)
    y = x + rng.normal(scale=0.3, size=10)
    a = permutation_correlation(x, y, seed=1, key="k")
    assert not a["exact"] and a["p"] == permutation_correlation(x, y, seed=1, key="k")["p"]
    assert a["p"] >= 1 / 10_000 and a["p"] < 0.01


def test_bad_input_is_refused():
    with pytest.raises(ValueError, match="at least 3"):
        permutation_correlation([1, 2], [1, 2])
    with pytest.raises(ValueError, match="constant"):
        permutation_correlation([1, 1, 1], [1, 2, 3])
