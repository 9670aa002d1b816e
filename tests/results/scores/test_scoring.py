"""Planted-structure tests of the scoring estimators (unit tier: no model)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from posgen.results.folder.config import Scoring
from posgen.results.scores import scoring
from posgen.results.scores.association import cross_model
from posgen.results.scores.scoring import (
    fit_quality,
    paired_bootstrap,
    tolerance,
)
from posgen.results.stats.resampling import resample_counts


def test_resample_counts_rows_sum_to_n_and_are_reproducible():
    a = resample_counts(17, 300, seed=3, key="k")
    assert a.shape == (300, 17)
    assert (a.sum(axis=1) == 17).all()
    assert np.array_equal(a, resample_counts(17, 300, seed=3, key="k"))
    assert not np.array_equal(a, resample_counts(17, 300, seed=3, key="other"))
    assert not np.array_equal(a, resample_counts(17, 300, seed=4, key="k"))
    # every document is drawn with probability 1/n: mean count 1
    assert abs(a.mean(axis=0) - 1).max() < 0.25


def _population(rng, size, shift):
    words = rng.integers(40, 200, size)
    nll = rng.normal(2.0, 0.4, size)  # per-word NLL of each document
    pert = nll + shift + rng.normal(0.0, 0.2, size)
    return words, -nll * words, -pert * words


def test_perplexity_ci_covers_the_true_relative_increase_about_95_percent():
    rng = np.random.default_rng(0)
    words, ll_base, ll_pert = _population(rng, 50_000, shift=0.05)
    truth = math.exp(-ll_pert.sum() / words.sum()) / math.exp(-ll_base.sum() / words.sum()) - 1
    hits, trials = 0, 200
    for t in range(trials):
        idx = rng.choice(words.size, 60, replace=False)
        res = paired_bootstrap(
            "perplexity",
            ll_base[idx],
            words[idx],
            ll_pert[idx],
            words[idx],
            iters=1000,
            seed=t,
            key="cov",
        )
        hits += res["ci_lo"] <= truth <= res["ci_hi"]
    assert 0.88 <= hits / trials <= 0.99, hits / trials


def test_accuracy_drop_ci_covers_the_true_drop():
    rng = np.random.default_rng(1)
    base = rng.random(50_000) < 0.7
    pert = np.where(rng.random(50_000) < 0.8, base, rng.random(50_000) < 0.4)
    truth = base.mean() - pert.mean()
    hits, trials = 0, 200
    for t in range(trials):
        idx = rng.choice(base.size, 80, replace=False)
        ones = np.ones(80)
        res = paired_bootstrap("mean", base[idx], ones, pert[idx], ones, iters=1000, seed=t)
        assert res["degradation"] == pytest.approx(base[idx].mean() - pert[idx].mean())
        hits += res["ci_lo"] <= truth <= res["ci_hi"]
    assert 0.88 <= hits / trials <= 0.99, hits / trials


def test_identical_cells_have_zero_degradation_and_a_zero_width_ci():
    ll, w = np.array([-10.0, -30.0, -7.0]), np.array([5.0, 12.0, 4.0])
    res = paired_bootstrap("perplexity", ll, w, ll, w, iters=200)
    assert res["degradation"] == 0 and res["ci_lo"] == 0 and res["ci_hi"] == 0


def test_perplexity_degradation_matches_lm_eval_weighted_perplexity():
    from lm_eval.api.metrics import weighted_perplexity

    ll_b, ll_p, w = [-10.0, -30.0, -7.0], [-11.0, -36.0, -7.5], [5, 12, 4]
    res = paired_bootstrap("perplexity", ll_b, w, ll_p, w, iters=50)
    expected = (
        weighted_perplexity(list(zip(ll_p, w, strict=True)))
        / weighted_perplexity(list(zip(ll_b, w, strict=True)))
        - 1
    )
    assert res["degradation"] == pytest.approx(expected, rel=1e-12)


def test_tolerance_on_a_hand_made_curve():
    rates = [0.01, 0.02, 0.05, 0.1, 0.2, 0.5]
    d = [0.01, 0.03, 0.08, 0.15, 0.4, 1.0]
    res = tolerance(rates, d, threshold=0.10)
    assert res["tolerance"] == 0.05
    assert res["crossing"] == pytest.approx(0.05 + 0.02 / 0.07 * 0.05)
    r = [0.0, *rates]
    area = sum((r[i + 1] - r[i]) * (([0.0, *d])[i] + ([0.0, *d])[i + 1]) / 2 for i in range(6))
    assert res["auc"] == pytest.approx(area / 0.5)
    # order of the input does not matter
    assert tolerance(rates[::-1], d[::-1], 0.10) == res


def test_tolerance_is_the_first_crossing_even_if_the_curve_dips_back():
    res = tolerance([0.01, 0.02, 0.05], [0.2, 0.05, 0.05], threshold=0.1)
    assert res["tolerance"] == 0.0
    assert res["crossing"] == pytest.approx(0.005)


def test_tolerance_never_crossing_is_censored_at_the_largest_rate():
    res = tolerance([0.1, 0.5], [0.01, 0.02], threshold=0.1)
    assert res["tolerance"] == 0.5 and res["crossing"] is None


def test_tolerance_needs_a_perturbed_rate():
    with pytest.raises(ValueError, match="rate > 0"):
        tolerance([0.0], [0.0], 0.1)


PPL = {
    "metric": "word_perplexity",
    "filter": "none",
    "aggregation": "weighted_perplexity",
    "higher_is_better": False,
}
ACC = {"metric": "acc", "filter": "none", "aggregation": "mean", "higher_is_better": True}


def test_degradation_and_tolerance_tables_from_perdoc_rows():
    rng = np.random.default_rng(2)
    rows = []
    for rate, shift in [(0.05, 0.01), (0.2, 0.2), (0.5, 0.6)]:
        for d in range(30):
            w = 100.0
            nll = 2 + rng.normal(0, 0.1)
            rows.append(
                {
                    "model": "m",
                    "task": "t",
                    **PPL,
                    "kind": "position",
                    "scheme": "swap",
                    "seed": 1,
                    "rate": rate,
                    "doc_key": str(d),
                    "base_num": -nll * w,
                    "base_den": w,
                    "num": -(nll + shift) * w,
                    "den": w,
                }
            )
    degr = scoring.degradation_table(pd.DataFrame(rows), Scoring(iters=300))
    assert list(degr["rate"]) == [0.05, 0.2, 0.5]
    assert degr["degradation"].tolist() == pytest.approx(
        [math.exp(0.01) - 1, math.exp(0.2) - 1, math.exp(0.6) - 1]
    )
    tol = scoring.tolerance_table(degr, Scoring(iters=300))
    assert tol.loc[0, "tolerance"] == 0.05
    assert tol.loc[0, "tolerance_lo"] <= tol.loc[0, "tolerance"] <= tol.loc[0, "tolerance_hi"]


def test_fit_quality_averages_documents_within_a_head_first():
    table = pd.DataFrame(
        {
            "doc": [0, 1, 2, 0],
            "layer": [0, 0, 0, 1],
            "head": [0, 0, 0, 0],
            "r_3axis": [0.9, 0.9, 0.9, 0.1],
            "r_2axis": [0.5, 0.5, 0.5, 0.1],
            "r_distance_key": [0.2, 0.2, 0.2, 0.0],
        }
    )
    fq = fit_quality(table)
    assert fq["r_3axis"] == pytest.approx(0.5)  # (0.9 + 0.1) / 2, not 0.7
    assert fq["r_2axis"] == pytest.approx(0.3)
    assert fq["n_heads"] == 2
    with pytest.raises(ValueError, match="r_3axis"):
        fit_quality(table.drop(columns="r_3axis"))


def test_cross_model_below_three_models_is_not_estimable():
    res = cross_model({"a": {"x": 0.1, "y": 0.2}, "b": {"x": 0.3, "y": 0.4}}, "x", "y")
    assert res["estimable"] is False and res["n"] == 2
    assert "spearman" not in res and "not estimable" in res["reason"]


def test_cross_model_recovers_a_planted_monotone_relation():
    per_model = {f"m{i}": {"x": i / 10, "y": (i / 10) ** 3} for i in range(8)}
    res = cross_model(per_model, "x", "y")
    assert res["estimable"] and res["n"] == 8 and res["claim"]
    assert res["spearman"]["r"] == pytest.approx(1.0)
    assert res["spearman"]["p"] == pytest.approx(2 / math.factorial(8))  # exact: ±1 only
    assert 0.8 < res["pearson"]["r"] < 1.0 and res["pearson"]["p"] < 0.01
    anti = {k: {"x": v["x"], "y": -v["y"]} for k, v in per_model.items()}
    assert cross_model(anti, "x", "y")["spearman"]["r"] == pytest.approx(-1.0)


def test_three_monotone_models_are_descriptive_with_p_one_third():
    per_model = {f"m{i}": {"x": i, "y": i * i} for i in range(3)}
    res = cross_model(per_model, "x", "y")
    assert res["descriptive_only"] and not res["claim"]
    assert res["spearman"]["p"] == pytest.approx(1 / 3)  # not a degenerate [1, 1] interval
    assert "ci_lo" not in res["spearman"]


def test_cross_model_excludes_twins():
    per_model = {f"m{i}": {"x": i, "y": i} for i in range(5)}
    per_model["m0+random-init"] = {"x": 9.0, "y": -9.0}
    res = cross_model(per_model, "x", "y", twins={"m0+random-init"})
    assert res["n"] == 5 and res["twins"] == ["m0+random-init"]
    assert res["spearman"]["r"] == pytest.approx(1.0)


def test_an_accuracy_curve_from_a_zero_accuracy_baseline_is_not_measurable():
    import pandas as pd

    from posgen.results.folder.metrics import MetricSpec
    from posgen.results.scores.scoring import model_summary, tolerance_table

    rows = []
    for model, base in (("trained", 0.6), ("chance-free", 0.0)):
        for rate, degr in ((0.05, 0.01), (0.5, 0.2 if base else 0.0)):
            rows.append(
                dict(
                    model=model,
                    task="t",
                    **ACC,
                    unit="fraction",
                    kind="text",
                    scheme="swap",
                    seed=1,
                    rate=rate,
                    degradation=degr,
                    ci_lo=degr,
                    ci_hi=degr,
                    stderr=0.0,
                    n=10,
                    baseline=base,
                )
            )
    tol = tolerance_table(pd.DataFrame(rows)).set_index("model")
    assert bool(tol.loc["trained", "measurable"]) and tol.loc["trained", "tolerance"] == 0.05
    # a model that scores 0 cannot drop: its flat curve says nothing about tolerance
    assert not bool(tol.loc["chance-free", "measurable"])
    summary = model_summary(tol.reset_index(), {}, {"t": [MetricSpec("acc")]})
    assert set(summary["t|text"]) == {"trained"}


def _perdoc(rng, n_docs, seeds, metric="word_perplexity"):
    rows = []
    w = rng.integers(100, 300, n_docs).astype(float)
    base = rng.normal(3.0, 0.3, n_docs)
    for s in seeds:
        pert = base + rng.normal(0.1, 0.05, n_docs)
        for i in range(n_docs):
            num, den = (-pert[i] * w[i], w[i]) if metric != "acc" else (float(pert[i] < 3.1), 1.0)
            bnum, bden = (-base[i] * w[i], w[i]) if metric != "acc" else (1.0, 1.0)
            rows.append(
                {
                    "model": "m",
                    "task": "t",
                    **(ACC if metric == "acc" else PPL),
                    "kind": "position",
                    "scheme": "swap",
                    "rate": 0.1,
                    "seed": s,
                    "doc_key": f"d{i}",
                    "base_num": bnum,
                    "base_den": bden,
                    "num": num,
                    "den": den,
                }
            )
    return pd.DataFrame(rows)


def test_degradation_table_averages_seeds_per_document_then_takes_the_doc_interval():
    from posgen.results.stats.intervals import ratio_interval

    perdoc = _perdoc(np.random.default_rng(5), 12, [7, 8, 9])
    cfg = Scoring(iters=500)
    row = scoring.degradation_table(perdoc, cfg).iloc[0]
    assert row["n"] == 12 and row["n_seeds"] == 3 and row["seed"] == 7
    g = perdoc.groupby("doc_key")[["base_num", "base_den", "num", "den"]].mean()
    want = ratio_interval(
        *(g[c].to_numpy() for c in g.columns),
        iters=500,
        key="m|t|word_perplexity|none|position|swap|7|0.1",
    )
    assert math.isclose(row["ci_lo"], want["ci_lo"]) and math.isclose(row["ci_hi"], want["ci_hi"])
    boot_t = scoring.degradation_table(perdoc, Scoring(interval="boot-t")).iloc[0]
    assert boot_t["degradation"] == row["degradation"] and boot_t["ci_lo"] != row["ci_lo"]


def test_accuracy_rows_use_agresti_min():
    from posgen.results.stats.intervals import agresti_min

    perdoc = _perdoc(np.random.default_rng(6), 24, [1], metric="acc")
    row = scoring.degradation_table(perdoc, Scoring()).iloc[0]
    want = agresti_min(perdoc["base_num"], perdoc["num"])
    assert math.isclose(row["ci_lo"], want["ci_lo"]) and math.isclose(row["ci_hi"], want["ci_hi"])


def test_consistency_is_the_share_of_unchanged_choices_with_a_wilson_interval():
    from posgen.results.stats.intervals import wilson

    perdoc = _perdoc(np.random.default_rng(7), 20, [1], metric="acc")
    perdoc["base_choice"] = 0
    perdoc["choice"] = [0] * 15 + [1] * 5
    row = scoring.degradation_table(perdoc, Scoring()).iloc[0]
    assert row["consistency"] == pytest.approx(0.75)
    assert (row["consistency_lo"], row["consistency_hi"]) == pytest.approx(wilson(15, 20))
    perdoc["choice"] = -1  # not logged: no figure rather than a wrong one
    assert math.isnan(scoring.degradation_table(perdoc, Scoring()).iloc[0]["consistency"])
