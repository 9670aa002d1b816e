"""Planted-truth tests of the degradation intervals (unit tier: no model)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from posgen.results.stats.intervals import (
    agresti_min,
    log_ratio_se,
    ratio_interval,
    resample_indices,
    wilson,
)


def _docs(rng, n, mean=0.1, sd=0.05):
    w = rng.uniform(150, 300, n)
    base = rng.normal(3.0, 0.3, n)
    pert = base + rng.normal(mean, sd, n)
    return -base * w, w, -pert * w, w


def test_log_ratio_is_the_log_perplexity_ratio_and_se_is_the_delta_method():
    rng = np.random.default_rng(1)
    bll, bw, pll, pw = _docs(rng, 20)
    L, se = log_ratio_se(bll, bw, pll, pw)
    assert math.isclose(L, -pll.sum() / pw.sum() + bll.sum() / bw.sum())
    # same weights: the influence reduces to w_d (δ_d - L) / mean(w)
    d = (bll / bw) - (pll / pw)
    z = bw * (d - L) / bw.mean()
    assert math.isclose(se, z.std(ddof=1) / math.sqrt(20))


@pytest.mark.parametrize("method", ["log-t", "boot-t"])
def test_interval_covers_the_planted_truth_near_nominally_at_six_documents(method):
    # the percentile bootstrap covers ~.86 here; these must stay near .95
    rng = np.random.default_rng(0)
    truth, hits, reps = math.expm1(0.1), 0, 400
    for r in range(reps):
        res = ratio_interval(*_docs(rng, 6), method=method, iters=999, seed=r)
        hits += res["ci_lo"] <= truth <= res["ci_hi"]
    assert hits / reps >= 0.91, hits / reps


def test_interval_is_reproducible_and_keyed():
    a = _docs(np.random.default_rng(2), 12)
    r1 = ratio_interval(*a, method="boot-t", key="x")
    assert r1 == ratio_interval(*a, method="boot-t", key="x")
    assert r1["ci_lo"] != ratio_interval(*a, method="boot-t", key="y")["ci_lo"]
    assert r1["ci_lo"] < r1["degradation"] < r1["ci_hi"]
    assert resample_indices(5, 3, 0, "k").max() < 5


def test_constant_shift_gives_a_point_interval_and_one_doc_none():
    w = np.array([100.0, 200.0, 150.0])
    base = np.array([3.0, 2.5, 2.8])
    res = ratio_interval(-base * w, w, -(base + 0.2) * w, w)
    assert math.isclose(res["ci_lo"], math.expm1(0.2)) and res["ci_lo"] == res["ci_hi"]
    one = ratio_interval([-3.0], [1.0], [-3.1], [1.0])
    assert math.isnan(one["ci_lo"]) and math.isclose(one["degradation"], math.expm1(0.1))
    with pytest.raises(ValueError, match="unknown interval"):
        ratio_interval(-base * w, w, -base * w, w, method="bca")


def test_agresti_min_is_not_degenerate_when_no_document_flips():
    base = np.ones(12)
    res = agresti_min(base, base)
    assert res["degradation"] == 0 and res["ci_lo"] < 0 < res["ci_hi"]
    assert res["ci_hi"] > 0.1  # 12 unchanged documents cannot rule out a 10-point drop


def test_agresti_min_matches_the_formula_and_covers():
    b = np.array([1, 1, 1, 1, 0, 0, 1, 1, 1, 0, 1, 1], float)
    p = np.array([0, 1, 1, 0, 0, 1, 1, 1, 1, 0, 1, 0], float)
    n10, n01 = 3, 1  # of n = 12 documents
    p10, p01 = (n10 + 0.5) / 14, (n01 + 0.5) / 14
    half = 1.959964 * math.sqrt((p10 + p01 - (p10 - p01) ** 2) / 14)
    res = agresti_min(b, p)
    assert math.isclose(res["degradation"], 2 / 12)
    assert math.isclose(res["ci_lo"], p10 - p01 - half, rel_tol=1e-5)
    # coverage at n = 12 for one planted table (2000 simulated tables)
    rng = np.random.default_rng(3)
    probs = np.array([0.15, 0.03, 0.7, 0.12])  # p10, p01, p11, p00
    hits = 0
    for _ in range(2000):
        cells = rng.choice(4, 12, p=probs)
        bb = np.isin(cells, [0, 2]).astype(float)
        pp = np.isin(cells, [1, 2]).astype(float)
        r = agresti_min(bb, pp)
        hits += r["ci_lo"] <= 0.12 <= r["ci_hi"]
    assert hits / 2000 >= 0.93


def test_wilson_matches_the_closed_form_and_stays_in_range():
    lo, hi = wilson(12, 12)
    assert hi == 1.0 and 0.7 < lo < 0.8  # k = n: not the degenerate [1, 1]
    lo, hi = wilson(6, 12)
    assert math.isclose(lo + hi, 1.0) and 0.25 < lo < 0.26
    with pytest.raises(ValueError):
        wilson(13, 12)


def test_default_interval_stays_finite_where_the_bootstrap_t_blows_up():
    # six documents of the embedded model (position swap 5%): two react much more
    w = np.array([216.0, 210.0, 200.0, 206.0, 209.0, 214.0])
    g = np.array([0.5818, 0.3033, 0.2979, 0.3019, 0.5171, 0.3068])  # nats per word
    a = (-3 * w, w, -(3 + g) * w, w)
    default = ratio_interval(*a)
    assert 0.2 < default["ci_lo"] < default["degradation"] < default["ci_hi"] < 0.8
    assert ratio_interval(*a, method="boot-t", key="k")["ci_hi"] > 10  # why log-t is default
