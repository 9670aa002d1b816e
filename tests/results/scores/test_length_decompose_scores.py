"""Scores of posgen length --decompose: per-layer means, r drop, and the rank correlation
over layers between drift and the r drop (planted values; scipy as the reference)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from posgen.results.scores.length_decompose import (
    decomposition_scores,
    layer_rows,
    rank_correlation,
)


def _record(scheme, doc, per_layer):
    """A decomposition record: ``per_layer[layer] = [(r_before, r_past), ...]`` per head."""
    heads = [
        {
            "layer": layer,
            "head": h,
            "r_3axis_before_context": before,
            "r_3axis_past_context": past,
            "a_trend_rms_before": 0.1,
            "a_trend_rms_past": 0.1 * (layer + 1),
        }
        for layer, pairs in enumerate(per_layer)
        for h, (before, past) in enumerate(pairs)
    ]
    return {"scheme": scheme, "document": doc, "heads": heads}


def test_layer_rows_average_heads_and_documents():
    records = [
        _record("none", "a", [[(0.9, 0.8), (0.7, 0.6)], [(0.5, 0.1), (0.5, 0.3)]]),
        _record("none", "b", [[(0.8, 0.8), (0.8, 0.8)], [(0.5, None), (0.5, 0.2)]]),
    ]
    rows = layer_rows(records)
    assert [(r["scheme"], r["layer"]) for r in rows] == [("none", 0), ("none", 1)]
    assert rows[0]["r_3axis_before_context"] == pytest.approx(0.8)
    assert rows[0]["r_3axis_past_context"] == pytest.approx(0.75)
    assert rows[0]["r_drop"] == pytest.approx(0.05)
    assert rows[1]["r_3axis_past_context"] == pytest.approx(0.2)  # None (NaN) left out
    assert rows[1]["a_trend_rms_past"] == pytest.approx(0.2)
    assert (rows[1]["n_documents"], rows[1]["n_heads"]) == (2, 4)


def test_layer_rows_of_alibi_average_the_full_logits_only():
    """An ALiBi record fits each head twice (full logits, q·k alone): only the full
    logits' rows are averaged, as for every other family."""
    full = _record("none", "a", [[(0.9, 0.8), (0.7, 0.6)]])
    qk = _record("none", "a", [[(0.1, 0.1), (0.1, 0.1)]])
    heads = [{**h, "logit_part": "full"} for h in full["heads"]]
    heads += [{**h, "logit_part": "qk"} for h in qk["heads"]]
    (row,) = layer_rows([{**full, "heads": heads}])
    assert row["r_3axis_before_context"] == pytest.approx(0.8)
    assert row["n_heads"] == 2


def test_rank_correlation_matches_spearman_with_ties_and_nan():
    rng = np.random.default_rng(3)
    x, y = rng.normal(size=12), rng.normal(size=12)
    x[4] = x[5]  # a tie
    rho, n = rank_correlation(x, y)
    assert n == 12 and rho == pytest.approx(stats.spearmanr(x, y).statistic)
    x[0] = np.nan
    rho, n = rank_correlation(x, y)
    assert n == 11 and rho == pytest.approx(stats.spearmanr(x[1:], y[1:]).statistic)
    assert rank_correlation([1.0, 2.0, 3.0], [0.1, 0.5, 0.9]) == (pytest.approx(1.0), 3)
    assert rank_correlation([1.0, 2.0, 3.0], [0.9, 0.5, 0.1])[0] == pytest.approx(-1.0)
    assert math.isnan(rank_correlation([1.0, 2.0], [1.0, 2.0])[0])  # < 3 layers
    assert math.isnan(rank_correlation([1.0, 2.0, 3.0], [1.0, 1.0, 1.0])[0])  # constant


def test_planted_layers_that_drift_are_the_ones_that_stop_decomposing():
    drops = [0.0, 0.05, 0.2, 0.4]  # r drop grows with the layer
    record = _record("scale:2.0", "a", [[(0.9, 0.9 - d)] for d in drops])
    drift = [{"scheme": "scale:2.0", "layer": k, "drift": 0.01 * k} for k in range(4)]
    scores = decomposition_scores([record], drift)
    found = scores["rank_correlation"]["scale:2.0"]
    assert (found["rho"], found["n_layers"]) == (pytest.approx(1.0), 4)
    # a perfectly monotone relation: the smallest p the mirror ring allows, 1 / L
    assert found["p"] == pytest.approx(1 / 4)
    assert [r["drift"] for r in scores["layers"]] == [0.0, 0.01, 0.02, 0.03]
    reversed_drift = [{**d, "drift": -d["drift"]} for d in drift]
    scores = decomposition_scores([record], reversed_drift)
    assert scores["rank_correlation"]["scale:2.0"]["rho"] == pytest.approx(-1.0)
    scores = decomposition_scores([record], [])  # no drift rows: NaN, no ρ
    assert all(math.isnan(r["drift"]) for r in scores["layers"])
    assert math.isnan(scores["rank_correlation"]["scale:2.0"]["rho"])


def test_the_p_values_are_the_layers_commands_within_model_test():
    from posgen.results.scores.layers import relation

    rng = np.random.default_rng(5)
    drops = np.cumsum(rng.normal(size=30)) / 10  # an autocorrelated profile over 30 layers
    record = _record("none", "a", [[(0.9, 0.9 - d)] for d in drops])
    drift_values = drops + rng.normal(scale=0.3, size=30)
    drift = [{"scheme": "none", "layer": k, "drift": float(v)} for k, v in enumerate(drift_values)]
    found = decomposition_scores([record], drift)["rank_correlation"]["none"]
    (expected,) = relation(drift_values, {"r_drop": 0.9 - (0.9 - drops)})
    for key in ("p", "rho_changes", "p_changes"):
        assert found[key] == pytest.approx(expected[key])
    assert found["rho"] == pytest.approx(expected["rho"])
    assert 1 / 60 <= found["p"] <= 1
