"""The gate's paired test and Holm's adjustment, on planted truth (unit tier)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from posgen.results.gate.check import compare
from posgen.results.stats.paired_test import holm, weighted_paired_t

SUITE = {"suite": "offline", "tasks": ["posgen_prose"]}


def test_equal_weights_reduce_to_the_paired_t_test():
    rng = np.random.default_rng(0)
    d = rng.normal(0.02, 0.05, 12)
    res = weighted_paired_t(d, np.ones(12))
    want = stats.ttest_1samp(d, 0.0, alternative="greater")
    assert res["p"] == pytest.approx(want.pvalue) and res["change"] == pytest.approx(d.mean())
    assert weighted_paired_t(d, np.ones(12), margin=0.5)["p"] > 0.99


def test_identical_changes_have_zero_se():
    assert weighted_paired_t(np.zeros(6), np.ones(6))["p"] == 1.0
    assert weighted_paired_t(np.full(6, 0.1), np.arange(1.0, 7.0))["p"] == 0.0


def test_holm_matches_the_step_down_rule():
    p = np.array([0.01, 0.04, 0.03, 0.5])
    assert holm(p) == pytest.approx([0.04, 0.09, 0.09, 0.5])
    assert holm([]).size == 0


def _payload(rng, base_nll, words, effect, draw_sd):
    """One run's cells: per-document g = effect + draw noise (nats per word)."""
    cells = []
    for c, eff in enumerate(effect):
        g = eff + rng.normal(0.0, draw_sd, words.size)
        cells.append(
            {
                "task": "posgen_prose",
                "metric": "word_perplexity",
                "kind": "position",
                "scheme": "swap",
                "rate": float(c + 1),
                "degradation": float(np.expm1((g * words).sum() / words.sum())),
                "docs": {
                    "keys": [f"d{i}" for i in range(words.size)],
                    "w": words.tolist(),
                    "g": g.tolist(),
                },
            }
        )
    return {"suite": SUITE, "limits": {"posgen_prose": 12}, "cells": cells}


def _alarm_rates(drop: float, cells: int, reps: int, seed: int) -> tuple[float, float]:
    """(share of families with any failing cell, share with cell 0 failing)."""
    rng = np.random.default_rng(seed)
    anyf = first = 0
    for _ in range(reps):
        words = rng.uniform(150, 300, 12)
        base_nll = rng.normal(3.0, 0.3, 12)
        effect = rng.lognormal(np.log(0.1), 0.5, (cells, 12))  # per-doc, per-cell sensitivity
        base = _payload(rng, base_nll, words, effect, 0.03)
        effect[0] += drop
        rows = compare(base, _payload(rng, base_nll, words, effect, 0.03))
        anyf += any(r["failed"] for r in rows)
        first += rows[0]["failed"]
    return anyf / reps, first / reps


def test_a_rerun_of_the_same_model_rarely_alarms_across_many_cells():
    any_alarm, _ = _alarm_rates(0.0, cells=15, reps=200, seed=1)
    assert any_alarm <= 0.09  # Holm: ≤ .05 family-wise (raw p would alarm in ~.5)


def test_a_real_drop_of_004_nats_per_word_on_12_documents_is_caught():
    _, caught = _alarm_rates(0.04, cells=1, reps=200, seed=2)
    assert caught >= 0.8  # an unpaired Welch test on the same runs catches ~.4
