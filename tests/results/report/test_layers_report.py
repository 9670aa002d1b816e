"""The ``posgen layers`` report: verdict sentence, tables, one figure panel per model."""

from __future__ import annotations

import math

from posgen.results.report.layers import profile_figure, render_markdown, verdict


def relation_row(name: str, p: float, p_changes: float) -> dict:
    return {
        "covariate": name,
        "rho": -0.5,
        "p": p,
        "naive_p": 1e-4,
        "rho_changes": -0.4,
        "p_changes": p_changes,
        "n_layers": 30,
        "null_size": 60,
    }


def profile(model: str, relation: list[dict]) -> dict:
    layers = [
        {"layer": i, "degradation": 0.1 * i, "ci_lo": 0.05 * i, "ci_hi": 0.2 * i, "fit_r": 0.9}
        for i in range(4)
    ]
    return {
        "model": model,
        "scheme": "swap:0.2",
        "documents": 6,
        "layers": layers,
        "all": {"degradation": 2.0, "ci_lo": 1.0, "ci_hi": 3.0},
        "additivity": {"sum_of_layers": 0.5, "all_layers": 1.1, "ratio": 0.45},
        "relation": relation,
    }


def test_an_association_needs_both_the_levels_and_the_changes_test():
    prof = profile("m", [relation_row("fit_r", 0.02, 0.03), relation_row("drift", 0.02, 0.4)])
    text = verdict(prof)
    assert "associated with fit_r" in text
    assert "drift (ρ = -0.50, p = 0.02; changes p = 0.4): one test only, not counted" in text
    assert "not a causal effect" in text


def test_no_passing_covariate_says_so():
    assert "not detectably associated" in verdict(profile("m", [relation_row("fit_r", 0.3, 0.01)]))
    untested = profile("m", [dict(relation_row("fit_r", math.nan, math.nan), null_size=0)])
    assert "No relation was tested" in verdict(untested)


def test_markdown_and_one_panel_per_model():
    profs = [profile("a", [relation_row("fit_r", 0.3, 0.2)]), profile("b", [])]
    md = render_markdown(profs)
    assert "## a" in md and "## b" in md and "| all | 2 | [1, 3] |" in md
    png = profile_figure(profs)
    assert png[:4] == b"\x89PNG"
    assert len(png) > len(profile_figure(profs[:1]))  # a second panel
