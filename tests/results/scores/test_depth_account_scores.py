"""Scores of the decomposition's account: each form's gap against plain's, the statement
by its rule (each branch reached by a planted case), and the mass's gap per layer."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from posgen.results.scores.depth_account import (
    account_sentence,
    curve_scores,
    form_verdict,
    mass_scores,
    mass_summary,
)

DEPTHS = (0.0, 0.5, 1.0)


def values(gaps: dict[str, float], docs: int = 12, noise: float = 0.2) -> pd.DataFrame:
    """Per form a U of ``gaps[form]`` nats in the gold NLL (middle above the ends)."""
    rng = np.random.default_rng(0)
    rows = []
    for d in range(docs):
        base = rng.normal(3.0, 1.0)
        for form, gap in gaps.items():
            for depth in DEPTHS:
                nll = base + (gap if depth == 0.5 else 0.0) + rng.normal(0, noise)
                rows.append({"model": "m", "random_init": False, "task": "posgen_kv",
                             "depth": depth, "doc_key": str(d), "form": form, "ll": -nll,
                             "greedy": nll < 3.0})  # fmt: skip
    return pd.DataFrame(rows)


def forms_of(gaps: dict[str, float]) -> dict[str, dict]:
    scores = curve_scores(values(gaps))
    return {r["form"]: r for r in scores["forms"] if r["metric"] == "perplexity"}


def test_each_branch_of_the_rule():
    out = forms_of({"plain": 2.0, "additive": 2.0, "distance": 0.0, "key": 1.0})
    assert out["additive"]["verdict"] == "keeps"
    assert out["distance"]["verdict"] == "loses"
    assert out["key"]["verdict"] == "keeps another size"
    assert out["additive"]["plain_gap"]["value"] == pytest.approx(2.0, abs=0.2)
    assert out["key"]["difference"]["value"] == pytest.approx(-1.0, abs=0.2)
    sentence = account_sentence(list(out.values()))
    assert sentence.startswith("The fitted form explains the curve (plain's gap +1.99")
    assert "logits=distance loses the gap" in sentence


def test_no_gap_under_plain_cannot_be_told():
    out = forms_of({"plain": 0.0, "additive": 2.0, "distance": 0.0, "key": 0.0})
    assert {r["verdict"] for r in out.values()} == {"cannot be told"}
    assert "cannot be told: plain shows no gap" in account_sentence(list(out.values()))


@pytest.mark.parametrize(
    ("sides", "verdict"),
    [
        ((1, 1, 0), "keeps"),
        ((1, 1, -1), "keeps another size"),
        ((1, 0, -1), "loses"),
        ((1, -1, -1), "loses"),
        ((1, 0, 0), "cannot be told"),
        ((0, 1, 1), "cannot be told"),
        ((-1, -1, 0), "keeps"),
    ],
)
def test_form_verdict_reads_the_three_intervals(sides, verdict):
    def iv(s: int) -> dict:
        return {"value": s, "ci_lo": s - 0.5 if s else -0.5, "ci_hi": s + 0.5 if s else 0.5}

    assert form_verdict(*map(iv, sides)) == verdict


def masses(docs: int = 6) -> pd.DataFrame:
    """Two layers of two heads: layer 0 puts less mass on the evidence in the middle
    (0.1 less; its fit 0.05 less), layer 1 the same at every depth."""
    rng = np.random.default_rng(1)
    rows = []
    for d in range(docs):
        for depth in DEPTHS:
            for layer in (0, 1):
                for head in (0, 1):
                    dip = 0.1 if (layer == 0 and depth == 0.5) else 0.0
                    m = 0.3 - dip + rng.normal(0, 0.01)
                    rows.append({"model": "m", "random_init": False, "task": "posgen_kv",
                                 "depth": depth, "doc_key": str(d), "layer": layer,
                                 "head": head, "measured": m, "additive": m + dip / 2,
                                 "distance": 0.3, "key": 0.3})  # fmt: skip
    return pd.DataFrame(rows)


def test_the_mass_gap_per_layer_and_over_layers():
    rows = mass_scores(masses())
    gap = {(r["layer"], r["form"]): r for r in rows if r["depth"] == "gap"}
    assert gap[(0, "measured")]["value"] == pytest.approx(-0.1, abs=0.01)
    assert gap[(0, "measured")]["ci_hi"] < 0
    assert gap[(0, "additive")]["value"] == pytest.approx(-0.05, abs=0.01)
    assert gap[(1, "measured")]["ci_lo"] < 0 < gap[(1, "measured")]["ci_hi"]
    at = {(r["layer"], r["form"], r["depth"]): r for r in rows}
    assert at[(0, "measured", 0.0)]["value"] == pytest.approx(0.3, abs=0.01)
    summary = {(r["form"], r["depth"]): r for r in mass_summary(masses())}
    assert summary[("measured", "gap")]["value"] == pytest.approx(-0.05, abs=0.005)
    assert summary[("additive", "gap - measured")]["value"] == pytest.approx(0.025, abs=0.003)
