"""Scores of ``posgen cause``: pooled r and share against the pooled entries, the NLL rows,
the relation over layers, the cross-model rows (twins listed, not counted)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest

from posgen.results.scores.cause import (
    cross_model_rows,
    layer_relation,
    nll_row,
    pooled_prediction,
    r_and_share,
)


def _sums(p: np.ndarray, m: np.ndarray) -> dict[str, float]:
    return {
        "changed": float(p.size),
        "sum_pred": p.sum(),
        "sum_meas": m.sum(),
        "sum_pred2": (p * p).sum(),
        "sum_meas2": (m * m).sum(),
        "sum_cross": (p * m).sum(),
    }


def test_pooled_r_and_share_are_those_of_all_entries_together():
    rng = np.random.default_rng(0)
    parts = [(rng.normal(size=50), rng.normal(size=50)) for _ in range(6)]
    parts = [(p, 0.7 * p + 0.3 * m) for p, m in parts]
    rows = [
        {
            "doc": k // 3,
            "scheme": "swap:0.2",
            "layer": 0,
            "head": k % 3,
            "entries": 100,
            "covered": 90,
            "kl_measured_predicted": 0.1,
            "kl_measured_plain": 0.4,
            "kl_predicted_plain": 0.3,
            **_sums(p, m),
        }
        for k, (p, m) in enumerate(parts)
    ]
    out = pooled_prediction(pd.DataFrame(rows), ["scheme", "layer"]).iloc[0]
    p, m = np.concatenate([x for x, _ in parts]), np.concatenate([y for _, y in parts])
    assert out["r"] == pytest.approx(np.corrcoef(p, m)[0, 1], rel=1e-9)
    assert out["share"] == pytest.approx(1 - ((m - p) ** 2).sum() / (m**2).sum(), rel=1e-9)
    assert out["coverage"] == pytest.approx(0.9)
    assert out["kl_explained"] == pytest.approx(0.75)
    assert out["predicted_change"] == pytest.approx(0.3)


def test_r_and_share_of_nothing_changed_are_nan():
    got = r_and_share(_sums(np.zeros(0), np.zeros(0)))
    assert math.isnan(got["r"]) and math.isnan(got["share"])
    perfect = r_and_share(_sums(np.arange(5.0), np.arange(5.0)))
    assert perfect == {"r": pytest.approx(1.0), "share": pytest.approx(1.0)}


def test_nll_row_is_per_token_beside_the_plain_model():
    row = nll_row([-10.0, -20.0], [-11.0, -22.0], [5, 5], [10, 20])
    assert row["nll"] == pytest.approx(33 / 30) and row["nll_plain"] == pytest.approx(1.0)
    assert row["degradation"] > 0 and row["ci_lo"] <= row["degradation"] <= row["ci_hi"]


def test_layer_relation_reads_the_layers_both_know():
    layers = list(range(12))
    by_layer = pd.DataFrame(
        {
            "layer": layers,
            "predicted_change": [0.1 * k for k in layers],
            "measured_change": [0.2 * k for k in layers],
            "r": [0.5] * 12,
        }
    )
    sensitivity = {k: 0.01 * k for k in range(14)}  # two layers the prediction has not
    rows = layer_relation(sensitivity, by_layer, {"fit_r": {k: 1.0 - 0.01 * k for k in layers}})
    by = {r["covariate"]: r for r in rows}
    assert by["predicted_change"]["rho"] == pytest.approx(1.0)
    assert by["predicted_change"]["n_layers"] == 12
    assert by["fit_r"]["rho"] == pytest.approx(-1.0)
    assert math.isnan(by["prediction_r"]["rho"])  # constant: no test


def _profile(name: str, change: float, sensitivity: float, twin: bool = False) -> dict:
    return {
        "model": name,
        "random_init": twin,
        "prediction": [{"scheme": "swap:0.2", "predicted_change": change, "share": change}],
        "layers_run": {"scheme": "swap:0.2", "all_layers": {"sensitivity": sensitivity}},
    }


def test_cross_model_rows_count_models_with_a_layers_run_and_not_twins():
    profiles = [_profile("a", 0.1, 1.0), _profile("b", 0.2, 2.0), _profile("a+t", 0.3, 0.1, True)]
    rows = cross_model_rows(profiles)
    assert [r["x"] for r in rows] == ["predicted_change", "prediction_share"]
    assert not rows[0]["estimable"] and rows[0]["n"] == 2 and rows[0]["twins"] == ["a+t"]
    rows = cross_model_rows(
        [*profiles, _profile("c", 0.4, 3.0), {**_profile("d", 1, 1), "layers_run": None}]
    )
    assert rows[0]["estimable"] and rows[0]["n"] == 3 and rows[0]["descriptive_only"]
    assert rows[0]["spearman"]["r"] == pytest.approx(1.0)


def test_kl_explained_of_a_change_at_rounding_level_is_nan():
    row = {
        "doc": 0,
        "scheme": "swap:0.2",
        "layer": 0,
        "head": 0,
        "entries": 10,
        "covered": 10,
        "kl_measured_predicted": 3e-10,
        "kl_measured_plain": -2e-10,  # float32 rounding of a change that is 0
        "kl_predicted_plain": 1e-10,
        **_sums(np.ones(3), np.ones(3)),
    }
    out = pooled_prediction(pd.DataFrame([row]), ["scheme"]).iloc[0]
    assert math.isnan(out["kl_explained"])
