"""Degradation of any lm-eval metric in its own unit, its direction from higher_is_better,
and the corpus bootstrap with lm-eval's own aggregation (unit tier: planted values)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from scipy import stats

from posgen.results.folder.config import Scoring
from posgen.results.folder.metrics import MetricSpec
from posgen.results.scores import metric_units, scoring
from posgen.results.scores.corpus import corpus_table


def _perdoc(spec: MetricSpec, base: np.ndarray, pert: np.ndarray, den=None) -> pd.DataFrame:
    den = np.ones_like(base) if den is None else den
    return pd.DataFrame(
        {
            "model": "m",
            "task": "t",
            "metric": spec.metric,
            "filter": spec.filter,
            "aggregation": spec.aggregation,
            "higher_is_better": bool(spec.higher_is_better),
            "kind": "text",
            "scheme": "swap",
            "rate": 0.2,
            "seed": 1,
            "doc_key": [f"d{i:02d}" for i in range(len(base))],
            "base_num": base,
            "base_den": den,
            "num": pert,
            "den": den,
        }
    )


def test_a_lower_is_better_mean_degrades_when_it_rises():
    rng = np.random.default_rng(0)
    base = rng.uniform(0.1, 0.5, 20)  # an error rate per document: in [0, 1], not 0/1
    pert = base + rng.normal(0.1, 0.05, 20)
    spec = MetricSpec("err", aggregation="mean", higher_is_better=False)
    row = scoring.degradation_table(_perdoc(spec, base, pert)).iloc[0]
    d = pert - base
    assert row["degradation"] == pytest.approx(d.mean()) and row["degradation"] > 0
    assert row["unit"] == "fraction" and row["interval"] == "paired-t"
    half = stats.t.ppf(0.975, 19) * d.std(ddof=1) / math.sqrt(20)
    assert (row["ci_lo"], row["ci_hi"]) == pytest.approx((d.mean() - half, d.mean() + half))
    # the same numbers declared higher-is-better read as an improvement
    better = MetricSpec("err", aggregation="mean", higher_is_better=True)
    assert scoring.degradation_table(_perdoc(better, base, pert)).iloc[0][
        "degradation"
    ] == pytest.approx(-d.mean())


def test_an_unbounded_mean_is_in_its_own_units_with_a_relative_threshold():
    base = np.array([3.0, 5.0, 4.0, 6.0])  # e.g. a per-document score out of 10
    spec = MetricSpec("score", aggregation="mean", higher_is_better=True)
    row = scoring.degradation_table(_perdoc(spec, base, base - 1.0)).iloc[0]
    assert row["unit"] == "metric" and row["degradation"] == pytest.approx(1.0)
    tol = scoring.tolerance_table(scoring.degradation_table(_perdoc(spec, base, base - 1.0)))
    assert tol.iloc[0]["threshold"] == pytest.approx(0.1 * 4.5)  # 10 % of the baseline


def test_bits_per_byte_degrades_by_the_rise_in_bits():
    rng = np.random.default_rng(1)
    nbytes = rng.integers(200, 400, 12).astype(float)
    ll = -rng.uniform(1.0, 1.5, 12) * nbytes
    ll_pert = ll - 0.1 * nbytes
    spec = MetricSpec("bits_per_byte", aggregation="bits_per_byte", higher_is_better=False)
    row = scoring.degradation_table(_perdoc(spec, ll, ll_pert, nbytes)).iloc[0]
    bpb = [-x.sum() / nbytes.sum() / math.log(2) for x in (ll, ll_pert)]
    assert row["unit"] == "bits" and row["degradation"] == pytest.approx(bpb[1] - bpb[0])
    ppl = MetricSpec("byte_perplexity", aggregation="weighted_perplexity", higher_is_better=False)
    rel = scoring.degradation_table(_perdoc(ppl, ll, ll_pert, nbytes)).iloc[0]
    assert row["ci_lo"] == pytest.approx(math.log2(1 + rel["ci_lo"]))  # the same interval
    thr = metric_units.threshold(Scoring(), "bits", 0.0)
    assert thr == pytest.approx(math.log2(1.1))  # +10 % of byte perplexity, in bits


def _corpus_pairs(spec, base_items, pert_by_seed):
    keys = [f"d{i:02d}" for i in range(len(base_items))]
    cell = {"model": "m", "task": "t", "kind": "text", "scheme": "swap", "rate": 0.5}
    return [
        {**cell, "seed": s, "spec": spec, "keys": keys, "base_items": base_items, "items": items}
        for s, items in pert_by_seed.items()
    ]


def test_a_corpus_metric_uses_lm_evals_own_aggregation_and_direction():
    from lm_eval.api.metrics import matthews_corrcoef, ter

    golds = [0, 1] * 10
    base = [[g, g if i % 5 else 1 - g] for i, g in enumerate(golds)]
    pert = [[g, g if i % 3 else 1 - g] for i, g in enumerate(golds)]
    mcc = MetricSpec("mcc", aggregation="matthews_corrcoef", higher_is_better=True)
    row = corpus_table(_corpus_pairs(mcc, base, {1: pert}), Scoring(iters=200))[0].iloc[0]
    want = matthews_corrcoef(base) - matthews_corrcoef(pert)
    assert row["degradation"] == pytest.approx(want) and want > 0
    assert row["unit"] == "metric" and row["interval"] == "bootstrap-percentile"
    assert row["ci_lo"] <= row["degradation"] <= row["ci_hi"] and row["n"] == 20
    again = corpus_table(_corpus_pairs(mcc, base, {1: pert}), Scoring(iters=200))[0].iloc[0]
    assert (again["ci_lo"], again["ci_hi"]) == (row["ci_lo"], row["ci_hi"])  # seeded
    # TER: lower is better, so a rise is the degradation
    refs = ["the cat sat on the mat", "a dog ran in the park", "the bird flew away"] * 3
    good, bad = [[r, r] for r in refs], [[r, r.replace("the", "a")] for r in refs]
    spec = MetricSpec("ter", aggregation="ter", higher_is_better=False)
    row = corpus_table(_corpus_pairs(spec, good, {1: bad}), Scoring(iters=50))[0].iloc[0]
    assert row["degradation"] == pytest.approx(ter(bad) - ter(good)) and row["degradation"] > 0


def test_a_corpus_metric_over_seeds_is_the_mean_of_the_seeds_degradation():
    from lm_eval.api.metrics import f1_score

    golds = [0, 1, 1, 0] * 4
    base = [[g, g] for g in golds]
    seeds = {7: [[g, 1 - g if i < 2 else g] for i, g in enumerate(golds)], 8: base}
    f1 = MetricSpec("f1", aggregation="f1", higher_is_better=True)
    row = corpus_table(_corpus_pairs(f1, base, seeds), Scoring(iters=50))[0].iloc[0]
    want = np.mean([f1_score(base) - f1_score(items) for items in seeds.values()])
    assert row["degradation"] == pytest.approx(want) and row["n_seeds"] == 2 and row["seed"] == 7


def test_the_shown_metrics_keep_one_log_likelihood_metric_and_every_other():
    specs = [
        MetricSpec("word_perplexity", aggregation="weighted_perplexity", higher_is_better=False),
        MetricSpec("byte_perplexity", aggregation="weighted_perplexity", higher_is_better=False),
        MetricSpec("exact_match", "strict-match"),
        MetricSpec("exact_match", "flexible-extract"),
        MetricSpec("bleu", aggregation="bleu"),
        MetricSpec("bypass", aggregation="bypass"),
    ]
    assert [s.key for s in metric_units.shown(specs)] == [
        "word_perplexity,none",
        "exact_match,strict-match",
        "exact_match,flexible-extract",
        "bleu,none",
    ]
    assert metric_units.primary(specs).metric == "word_perplexity"
    assert metric_units.primary(specs[2:]).key == "exact_match,strict-match"
    assert metric_units.primary(specs[-1:]) is None


@pytest.mark.parametrize(
    "unit,hib,base,ok",
    [
        ("fraction", True, 0.03, False),  # cannot drop 0.05 below 0.03
        ("fraction", True, 0.6, True),
        ("fraction", False, 0.98, False),  # an error rate at 0.98 cannot rise by 0.05
        ("metric", True, 0.0, False),  # 10 % of 0 is no threshold
        ("relative", False, 123.0, True),
    ],
)
def test_measurable_by_unit_and_direction(unit, hib, base, ok):
    thr = metric_units.threshold(Scoring(), unit, base)
    assert metric_units.measurable(unit, hib, base, thr) is ok
