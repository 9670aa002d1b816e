"""The gate's stated power: MDE80 from the exact noncentral t, and no claim where the
paired spread cannot be estimated (unit tier: planted payloads, no model)."""

from __future__ import annotations

import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest
from scipy import stats

from posgen.results.gate.check import Margins, compare
from posgen.results.gate.margins import margin_on_test_scale
from posgen.results.gate.output import format_table, junit_xml, summary
from posgen.results.gate.power import documents_needed, noncentrality, spread_known
from synthetic_run import gate_cell

INFO = {
    "model": "cand",
    "baseline_model": "base",
    "alpha": 0.05,
    "statistic": "mean",
    "draw": [],
    "seeds": 1,
}


def _cell(rate: float, g, w=None, task="posgen_prose", metric="word_perplexity") -> dict:
    return gate_cell(rate, g, w, task, metric, worst=True)


def _family(n: int, m: int, seed: int, shift: float = 0.0):
    """Baseline and candidate payloads of ``m`` prose cells of ``n`` documents."""
    rng = np.random.default_rng(seed)
    base = [_cell(0.01 * (i + 1), rng.normal(0.1, 0.05, n)) for i in range(m)]
    cand = [
        _cell(c["rate"], np.array(c["docs"]["g"]) + shift + rng.normal(0, 0.01, n)) for c in base
    ]
    return {"cells": base}, {"cells": cand}


@pytest.mark.parametrize("n", [6, 12])
@pytest.mark.parametrize("m", [12, 34])
def test_mde80_has_exactly_80_percent_power_by_a_direct_noncentral_t(n, m):
    base, cand = _family(n, m, seed=n * 100 + m)
    rows = compare(base, cand, alpha=0.05)
    margin = margin_on_test_scale("perplexity", Margins().perplexity)
    crit = stats.t.ppf(1 - 0.05 / m, n - 1)
    for r in rows:
        mde = math.log1p(r["mde"] / 100)  # back on the test's scale
        power = stats.nct.sf(crit, n - 1, (mde - margin) / r["se"])
        assert power == pytest.approx(0.8, abs=1e-9) and power >= 0.8 - 1e-12
        below = stats.nct.sf(crit, n - 1, (mde - margin) / r["se"] - 1e-6)
        assert below < 0.8
    # the quantile sum it replaces is optimistic: less than 80 % power
    approx = stats.t.ppf(1 - 0.05 / m, n - 1) + stats.t.ppf(0.8, n - 1)
    assert stats.nct.sf(crit, n - 1, approx) < 0.8
    assert noncentrality(n, m, 0.05) > approx


def test_all_paired_differences_equal_make_no_power_claim_in_table_summary_or_junit():
    rng = np.random.default_rng(3)
    g = rng.normal(0.1, 0.05, 12)
    other = rng.normal(0.2, 0.05, 12)
    base = {"cells": [_cell(0.05, g), _cell(0.2, other)]}
    # cell @0.05: every document 0.001 nats/word worse (same draws); @0.2: a real spread
    cand = {"cells": [_cell(0.05, g + 0.001), _cell(0.2, other + rng.normal(0, 0.002, 12))]}
    rows = compare(base, cand)
    flat = next(r for r in rows if r["rate"] == 0.05)
    assert flat["power"] == "unknown" and flat["mde"] is None and flat["docs_needed"] is None
    assert not flat["failed"]  # inside the 2 % margin
    line = next(x for x in format_table(rows, 0.05).splitlines() if " 0.05 " in x)
    assert "n/a" in line and "power cannot be estimated" in line
    text = "\n".join(summary(rows, INFO))
    assert "1 of 2 cells: power cannot be estimated" in text
    assert "position/swap@0.05" in text.split("power cannot be estimated", 1)[1]
    assert "the other cell catches a change of twice the margin" in text
    assert "every cell catches" not in text
    suite = ET.fromstring(junit_xml(rows, INFO))
    case = next(t for t in suite.iter("testcase") if t.get("name").endswith("@0.05"))
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["mde"] == "n/a" and props["power"] == "unknown"
    assert "power cannot be estimated" in case.find("system-out").text


def test_a_same_seed_rerun_of_the_same_model_claims_no_power_at_all():
    base, _ = _family(12, 3, seed=1)
    rows = compare(base, base)
    assert {r["power"] for r in rows} == {"unknown"}
    text = "\n".join(summary(rows, INFO))
    assert "3 of 3 cells: power cannot be estimated" in text and "twice" not in text


def test_one_flipped_cloze_item_is_no_spread_two_are():
    acc = dict(task="posgen_cloze", metric="acc")
    base = {"cells": [_cell(0.1, np.zeros(6), np.ones(6), **acc)]}
    one = {"cells": [_cell(0.1, [1, 0, 0, 0, 0, 0], np.ones(6), **acc)]}
    two = {"cells": [_cell(0.1, [1, 0, 0, 0, 0, -1], np.ones(6), **acc)]}
    assert compare(base, one)[0]["power"] == "unknown"
    row = compare(base, two)[0]
    assert row["power"] == "underpowered" and row["mde"] > 50  # points, at 6 items


def test_spread_known_counts_documents_away_from_the_most_common_difference():
    assert not spread_known(np.zeros(12))
    assert not spread_known(np.full(12, 0.3))
    assert not spread_known([0, 0, 0, 1.0])
    assert spread_known([0, 0, 1.0, 1.0])
    assert spread_known(np.linspace(0, 1, 5))
    assert not spread_known(np.full(5, 0.1) + np.array([0, 1e-17, 0, 0, 0]))  # rounding


def test_documents_needed_is_the_smallest_n_whose_exact_excess_fits_the_margin():
    sd, margin, cells = 0.05, 0.04, 30
    n = documents_needed(sd, margin, cells, 0.05)
    assert noncentrality(n, cells, 0.05) * sd / np.sqrt(n) <= margin
    assert noncentrality(n - 1, cells, 0.05) * sd / np.sqrt(n - 1) > margin
    assert documents_needed(0.0, margin, cells, 0.05) == 2
    assert documents_needed(sd, 0.0, cells, 0.05) is None


def test_the_seeds_hint_appears_only_when_the_draws_differ():
    acc = dict(task="posgen_cloze", metric="acc")
    base = {"cells": [_cell(0.1, np.zeros(12), np.ones(12), **acc)]}
    cand = {"cells": [_cell(0.1, [1, -1] * 3 + [0] * 6, np.ones(12), **acc)]}
    rows = compare(base, cand)
    assert rows[0]["power"] == "underpowered"
    same = "\n".join(summary(rows, INFO))
    assert "needs about" in same and "seeds" not in same
    other = "\n".join(summary(rows, {**INFO, "draw": ["seed 1 vs 2"], "seeds": 1}))
    assert "seeds if the spread is draw noise" in other


def test_gate_verdict_one_meaning_per_exit_status():
    from posgen.results.gate.output import EXIT, blind_cells, gate_verdict

    base, cand = _family(12, 3, seed=5)
    powered = compare(base, cand)
    assert {r["power"] for r in powered} == {"powered"} and not blind_cells(powered)
    assert EXIT[gate_verdict(powered, require_power=True)] == 0
    flat = compare(base, base)  # no spread: no power claim
    assert EXIT[gate_verdict(flat, require_power=False)] == 0
    assert EXIT[gate_verdict(flat, require_power=True)] == 3
    worse, _ = _family(12, 3, seed=5)
    _, much = _family(12, 3, seed=5, shift=0.5)
    assert EXIT[gate_verdict(compare(worse, much), require_power=True)] == 1
    assert sorted(EXIT.values()) == [0, 1, 2, 3]
