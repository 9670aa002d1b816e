"""The gate's paired test and Holm's adjustment, on planted truth (unit tier)."""

from __future__ import annotations

import numpy as np
import pytest
from scipy import stats

from posgen.results.gate.check import Margins, compare
from posgen.results.gate.margins import margin_on_test_scale, to_user
from posgen.results.stats.paired_test import holm, holm_factors, weighted_paired_t
from synthetic_run import gate_cell

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


def test_holm_factors_give_each_cells_level_of_rejection():
    p = np.array([0.01, 0.04, 0.03, 0.5, 0.0])
    k = holm_factors(p)
    # sorted: 0 (step 5), .01 (4), .03 (3), .04 (max(3 * .03, 2 * .04) / .04), .5 (1)
    assert k == pytest.approx([4.0, 0.09 / 0.04, 3.0, 1.0, 5.0])
    adj = holm(p)
    assert np.minimum(1, k * p) == pytest.approx(adj)
    for alpha in (0.03, 0.05, 0.1, 0.2):
        assert ((p <= alpha / k) == (adj <= alpha)).all()


def _payload(rng, base_nll, words, effect, draw_sd):
    """One run's cells: per-document g = effect + draw noise (nats per word)."""
    cells = []
    for c, eff in enumerate(effect):
        g = eff + rng.normal(0.0, draw_sd, words.size)
        change = float(np.expm1((g * words).sum() / words.sum()))
        cells.append(gate_cell(float(c + 1), g, words, degradation=change))
    return {"suite": SUITE, "limits": {"posgen_prose": 12}, "cells": cells}


def _alarm_rates(
    drop: float, cells: int, reps: int, seed: int, margins: Margins | None = None
) -> tuple[float, float]:
    """(share of families with any failing cell, share with cell 0 failing)."""
    rng = np.random.default_rng(seed)
    anyf = first = 0
    for _ in range(reps):
        words = rng.uniform(150, 300, 12)
        base_nll = rng.normal(3.0, 0.3, 12)
        effect = rng.lognormal(np.log(0.1), 0.5, (cells, 12))  # per-doc, per-cell sensitivity
        base = _payload(rng, base_nll, words, effect, 0.03)
        effect[0] += drop
        rows = compare(base, _payload(rng, base_nll, words, effect, 0.03), margins)
        anyf += any(r["failed"] for r in rows)
        first += rows[0]["failed"]
    return anyf / reps, first / reps


def test_a_rerun_of_the_same_model_rarely_alarms_across_many_cells():
    any_alarm, _ = _alarm_rates(0.0, cells=15, reps=200, seed=1)
    assert any_alarm <= 0.09  # Holm: ≤ .05 family-wise (raw p would alarm in ~.5)


def test_a_real_drop_of_004_nats_per_word_on_12_documents_is_caught_at_margin_0():
    _, caught = _alarm_rates(0.04, cells=1, reps=200, seed=2, margins=Margins(perplexity=0.0))
    assert caught >= 0.8  # an unpaired Welch test on the same runs catches ~.4


def test_a_drop_inside_the_margin_passes_and_one_far_past_it_fails():
    # the 2 % margin is log(1.02) = .0198 nats/word; draw noise .03 per run and document
    _, inside = _alarm_rates(0.01, cells=1, reps=200, seed=3)
    _, past = _alarm_rates(0.08, cells=1, reps=200, seed=4)
    assert inside <= 0.05 and past >= 0.8


def test_a_tiny_shift_on_every_document_fails_only_without_a_margin():
    """Same seed: the paired differences are a constant 2e-4 nats/word (se = 0)."""
    words = np.linspace(150, 300, 12)
    g = np.linspace(0.05, 0.15, 12)
    base = _payload_from(g, words)
    cur = _payload_from(g + 2e-4, words)
    assert compare(base, cur, Margins(perplexity=0.0))[0]["failed"]
    assert not compare(base, cur)[0]["failed"]


def _payload_from(g, words):
    return {"cells": [gate_cell(0.1, g, words)]}


@pytest.mark.parametrize("kind", ["perplexity", "accuracy", "length"])
def test_a_margin_in_the_users_unit_converts_back_exactly(kind):
    assert to_user(kind, margin_on_test_scale(kind, 5.0)) == pytest.approx(5.0)


def test_perplexity_margins_are_percent_of_the_perplexity_ratio():
    # baseline ratio 1.50x, candidate 1.53x: 2 % more
    base, cur = np.log(1.5), np.log(1.53)
    assert to_user("perplexity", cur - base) == pytest.approx(2.0)
    assert margin_on_test_scale("perplexity", 2.0) == pytest.approx(np.log(1.02))
