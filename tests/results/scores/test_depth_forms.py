"""Text form against position form: the paired difference at each depth and the
statement of where the curve comes from, each branch reached by a planted case."""

from __future__ import annotations

import pytest
from tests.depth_documents import DEPTHS, acc_rows, nll_rows, perdoc, u_shape

from posgen.results.scores.depth import DepthError, depth_documents
from posgen.results.scores.depth_forms import compare_forms, verdict


def _compare(text: float, position: float, **kw):
    rows = nll_rows({"text": u_shape(text), "position": u_shape(position)}, **kw)
    return compare_forms(depth_documents(perdoc(rows)), "m", "posgen_kv", "perplexity")


def test_the_same_gap_in_both_forms_comes_from_positions():
    out = _compare(1.5, 1.5)
    assert out["verdict"] == "positions"
    assert out["sentence"].startswith("The depth curve comes from positions")
    assert out["text_gap"]["ci_lo"] > 0 and out["position_gap"]["ci_lo"] > 0
    assert out["gap_difference"]["ci_lo"] < 0 < out["gap_difference"]["ci_hi"]


def test_a_gap_in_the_text_form_only_comes_from_reading_order():
    out = _compare(1.5, 0.0)
    assert out["verdict"] == "reading order"
    assert "comes from reading order" in out["sentence"]
    at = {r["depth"]: r for r in out["depths"]}  # the forms differ in the middle only
    assert at[0.5]["ci_lo"] > 1.0 and at[0.0]["ci_lo"] < 0 < at[0.0]["ci_hi"]
    assert [r["depth"] for r in out["depths"]] == list(DEPTHS)


def test_a_smaller_gap_from_positions_alone_comes_from_both():
    out = _compare(2.0, 0.8)
    assert out["verdict"] == "both"
    assert out["gap_difference"]["value"] == pytest.approx(1.2, abs=0.25)
    assert "comes from both" in out["sentence"]


def test_no_gap_in_either_form_cannot_be_told():
    out = _compare(0.0, 0.0)
    assert out["verdict"] == "cannot be told"
    assert "cannot be told" in out["sentence"]


def test_zero_one_documents_with_no_depth_effect_cannot_be_told():
    flat = dict.fromkeys(DEPTHS, 0.7)
    docs = depth_documents(perdoc(acc_rows({"text": flat, "position": flat}, n=24)))
    out = compare_forms(docs, "m", "kv_mc", "acc")
    assert out["verdict"] == "cannot be told" and out["text_gap"]["interval"] == "agresti-min"
    assert out["gap_difference"]["ci_lo"] < 0 < out["gap_difference"]["ci_hi"]


def test_zero_one_documents_lost_in_the_middle_in_both_forms_come_from_positions():
    u = {0.0: 0.95, 0.25: 0.6, 0.5: 0.3, 0.75: 0.6, 1.0: 0.95}
    docs = depth_documents(perdoc(acc_rows({"text": u, "position": u}, n=48)))
    out = compare_forms(docs, "m", "kv_mc", "acc")
    assert out["verdict"] == "positions" and out["text_gap"]["ci_hi"] < 0


def _iv(lo: float, hi: float) -> dict:
    return {"value": (lo + hi) / 2, "ci_lo": lo, "ci_hi": hi}


@pytest.mark.parametrize(
    ("text", "pos", "diff", "expected"),
    [
        ((1, 2), (1, 2), (-1, 1), "positions"),
        ((1, 2), (-1, 1), (0.5, 2), "reading order"),
        ((1, 2), (-1, 1), (-1, 1), "cannot be told"),  # the position form's share unknown
        ((2, 3), (0.5, 1), (1, 2), "both"),
        ((-1, 1), (0.5, 1), (-2, -0.1), "both"),  # reading order cancels the ids' gap
        ((-1, 1), (0.5, 1), (-1, 1), "cannot be told"),  # the text form shows no gap
        ((1, 2), (-2, -1), (-1, 5), "cannot be told"),  # opposite sides, Δ undecided
        ((-1, 1), (-1, 1), (2, 3), "cannot be told"),  # no gap in either form
    ],
)
def test_the_rule_for_each_combination_of_intervals(text, pos, diff, expected):
    assert verdict(_iv(*text), _iv(*pos), _iv(*diff)) == expected


def test_without_the_middle_and_both_ends_nothing_is_stated():
    rows = nll_rows({"text": {0.0: 0, 0.5: 1}, "position": {0.0: 0, 0.5: 1}}, n=6)
    out = compare_forms(depth_documents(perdoc(rows)), "m", "posgen_kv", "perplexity")
    assert out["verdict"] == "cannot be told" and out["text_gap"] is None
    assert "needs depths 0, 0.5 and 1" in out["sentence"]
    only_text = depth_documents(perdoc(nll_rows({"text": u_shape(1.0)}, n=6)))
    assert compare_forms(only_text, "m", "posgen_kv", "perplexity") is None


def test_forms_that_score_different_documents_are_refused():
    rows = nll_rows({"text": u_shape(1.0)}, n=6) + nll_rows({"position": u_shape(1.0)}, n=5)
    with pytest.raises(DepthError, match="different documents"):
        compare_forms(depth_documents(perdoc(rows)), "m", "posgen_kv", "perplexity")
