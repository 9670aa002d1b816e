"""Evidence-depth scores: the curve with paired intervals and the middle-versus-ends gap
(unit tier, planted per-document data)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
from tests.depth_documents import DEPTHS, acc_rows, nll_rows, perdoc, u_shape

from posgen.results.scores.depth import (
    DepthError,
    depth_documents,
    depth_scores,
    gap,
    paired_difference,
)


def test_depth_cells_become_per_document_values_in_the_metrics_own_direction():
    rows = nll_rows({"text": u_shape(2.0)}, n=4) + acc_rows({"position": {0.5: 0.5}}, n=4)
    other = dict(rows[0], scheme="swap", rate=0.05)  # a word-order cell: not a depth cell
    docs = depth_documents(perdoc([*rows, other]))
    assert len(docs) == len(rows)
    nll = docs[docs["metric"] == "perplexity"]
    assert not nll["binary"].any() and (nll["value"] > 0).all()  # NLL: -ll, nats
    assert set(nll["depth"]) == set(DEPTHS)
    acc = docs[docs["metric"] == "acc"]
    assert acc["binary"].all() and set(acc["value"]) <= {0.0, 1.0}
    assert set(acc["form"]) == {"position"}


def test_a_mean_of_scores_that_are_not_zero_one_is_continuous():
    rows = [dict(r, num=r["num"] * 0.5 + 0.25) for r in acc_rows({"text": {0.5: 0.5}}, n=6)]
    assert not depth_documents(perdoc(rows))["binary"].any()


def test_a_planted_u_gives_its_gap_with_an_interval_that_holds_it():
    docs = depth_documents(perdoc(nll_rows({"text": u_shape(1.5)}, n=24, noise=0.3)))
    out = depth_scores(docs)
    (g,) = out["gaps"]
    assert g["interval"] == "paired-t" and g["n"] == 24
    assert g["ci_lo"] <= 1.5 <= g["ci_hi"] and g["ci_lo"] > 0  # NLL higher in the middle
    assert g["value"] == pytest.approx(1.5, abs=0.2)
    curve = {r["depth"]: r for r in out["curves"]}
    assert list(curve) == list(DEPTHS)
    assert curve[0.5]["diff"] == pytest.approx(g["value"])  # D = .5 against the ends: the gap
    assert curve[0.5]["ci_lo"] < curve[0.5]["value"] < curve[0.5]["ci_hi"]
    assert curve[0.0]["diff_lo"] < 0 < curve[0.0]["diff_hi"]  # flat between the two ends


def test_the_gap_is_paired_document_difficulty_cancels():
    # documents differ by ~1 nat each; the depth effect is .3 with little noise
    docs = depth_documents(perdoc(nll_rows({"text": u_shape(0.3)}, n=12, noise=0.05)))
    g = depth_scores(docs)["gaps"][0]
    means = {r["depth"]: r for r in depth_scores(docs)["curves"]}
    assert g["ci_lo"] > 0.2  # paired: the difficulty spread does not enter
    assert means[0.5]["ci_lo"] < means[0.0]["ci_hi"]  # unpaired means overlap


def test_a_zero_one_gap_where_no_document_moves_keeps_a_width():
    docs = depth_documents(perdoc(acc_rows({"text": dict.fromkeys(DEPTHS, 0.8)}, n=12)))
    g = depth_scores(docs)["gaps"][0]
    assert g["value"] == 0 and g["interval"] == "agresti-min"
    assert g["ci_lo"] < -0.05 and g["ci_hi"] > 0.05  # a t interval would give [0, 0]
    assert paired_difference(np.ones(12), np.ones(12), False)["ci_hi"] == 0


def test_a_zero_one_gap_lost_in_the_middle_is_found():
    probs = {0.0: 0.9, 0.25: 0.6, 0.5: 0.3, 0.75: 0.6, 1.0: 0.9}
    docs = depth_documents(perdoc(acc_rows({"position": probs}, n=48)))
    (g,) = depth_scores(docs)["gaps"]
    assert g["ci_hi"] < 0 and g["value"] == pytest.approx(-0.6, abs=0.1)  # accuracy lower


def test_the_curve_mean_of_a_zero_one_metric_has_a_wilson_interval():
    docs = depth_documents(perdoc(acc_rows({"text": {0.0: 1.0, 0.5: 0.5, 1.0: 1.0}}, n=12)))
    curve = {r["depth"]: r for r in depth_scores(docs)["curves"]}
    assert curve[0.0]["value"] == 1 and curve[0.0]["interval"] == "wilson"
    assert curve[0.0]["ci_lo"] < 1  # all 12 right still leaves an interval below 1


def test_no_gap_without_the_middle_or_an_end():
    docs = depth_documents(perdoc(nll_rows({"text": {0.0: 0, 0.25: 1, 1.0: 0}}, n=6)))
    assert gap(docs) is None and depth_scores(docs)["gaps"] == []
    rows = depth_scores(docs)["curves"]
    assert all(math.isfinite(r["diff"]) for r in rows)
    docs = depth_documents(perdoc(nll_rows({"text": {0.25: 0, 0.5: 1}}, n=6)))
    assert gap(docs) is None and all(math.isnan(r["diff"]) for r in depth_scores(docs)["curves"])


def test_depths_that_score_different_documents_are_refused():
    rows = nll_rows({"text": u_shape(1.0)}, n=6)
    rows = [r for r in rows if not (r["rate"] == 0.5 and r["doc_key"] == "test:0")]
    with pytest.raises(DepthError, match="different documents"):
        depth_scores(depth_documents(pd.DataFrame(rows)))
