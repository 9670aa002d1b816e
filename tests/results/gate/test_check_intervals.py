"""The interval printed beside a verdict is the Holm-adjusted one and agrees with it
(unit tier: planted payloads, no model)."""

from __future__ import annotations

import re

import numpy as np
import pytest
from scipy import stats

from posgen.results.gate.check import check_options, compare
from posgen.results.gate.margins import margin_on_test_scale, to_user
from posgen.results.gate.output import format_table
from synthetic_run import gate_cell


def _payload(g: np.ndarray, w: np.ndarray) -> dict:
    """``g``: ``[cells, n]`` per-document degradations of prose cells."""
    return {"cells": [gate_cell(round(0.01 * (i + 1), 2), row, w) for i, row in enumerate(g)]}


@pytest.mark.parametrize("seed", range(6))
def test_a_cell_fails_exactly_when_its_holm_interval_is_above_the_margin(seed):
    rng = np.random.default_rng(seed)
    cells, n = 20, 12
    w = rng.uniform(150, 300, n)
    g = rng.normal(0.1, 0.05, (cells, n))
    shift = rng.choice([0.0, 0.015, 0.03, 0.05], cells)[:, None]  # around the 2 % margin
    rows = compare(_payload(g, w), _payload(g + shift + rng.normal(0, 0.01, (cells, n)), w))
    margin = to_user("perplexity", margin_on_test_scale("perplexity", 2.0))
    assert any(r["failed"] for r in rows) and not all(r["failed"] for r in rows)
    for r in rows:
        assert (r["ci_lo"] > margin) == r["failed"], r
        assert 1 <= r["holm_factor"] <= cells
        # the unadjusted interval is narrower and kept beside it
        assert r["ci_lo_unadjusted"] >= r["ci_lo"] and r["ci_hi_unadjusted"] <= r["ci_hi"]
        half = stats.t.ppf(1 - 0.05 / r["holm_factor"], n - 1) * r["se"]
        assert r["ci_lo"] == pytest.approx(to_user("perplexity", r["change_test"] - half))


def test_an_unadjusted_interval_above_the_margin_no_longer_sits_beside_ok():
    """Twenty cells, one of them 3 % worse, 2.5 standard errors past the 2 % margin:
    the unadjusted 90 % interval clears the margin, Holm (t = 3.5 at alpha/20) does not,
    and the printed interval reaches below the margin."""
    rng = np.random.default_rng(0)
    n, w = 12, np.full(12, 200.0)
    g = rng.normal(0.1, 0.05, (20, 12))
    z = rng.normal(size=n)
    z = (z - z.mean()) / z.std(ddof=1)
    se = (np.log(1.03) - np.log(1.02)) / 2.5
    cand = g.copy()
    cand[0] += np.log(1.03) + z * se * np.sqrt(n)
    rows = compare(_payload(g, w), _payload(cand, w))
    r = rows[0]
    assert r["ci_lo_unadjusted"] > 2.0 and not r["failed"]
    assert r["ci_lo"] <= 2.0
    line = format_table(rows, 0.05).splitlines()[2]
    assert f"[{r['ci_lo']:+.2f}, {r['ci_hi']:+.2f}]" in line and line.endswith("ok")
    assert "interval (Holm)" in format_table(rows, 0.05).splitlines()[0]


@pytest.mark.parametrize(
    "alpha,statistic,message",
    [
        (0.0, "mean", "--alpha must be in (0, 1)"),
        (1.0, "mean", "--alpha must be in (0, 1)"),
        (float("nan"), "mean", "--alpha must be in (0, 1)"),
        (0.05, "median", "--statistic: 'median'; give mean or worst"),
    ],
)
def test_alpha_and_statistic_are_checked_in_one_place(alpha, statistic, message):
    with pytest.raises(ValueError, match=re.escape(message)):
        check_options(alpha, statistic)
    g = np.zeros((1, 3))
    with pytest.raises(ValueError, match=re.escape(message)):
        compare(_payload(g, np.ones(3)), _payload(g, np.ones(3)), alpha=alpha, statistic=statistic)
