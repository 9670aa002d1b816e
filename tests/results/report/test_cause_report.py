"""The ``posgen cause`` report: the answer read off its three stated checks, the tables
and the figure."""

from __future__ import annotations

from posgen.results.report.cause import answer, checks, render_markdown
from posgen.results.report.cause_figure import cause_figure


def _nll(form: str, layer, d: float) -> dict:
    return {
        "cell": f"{form}-{layer}",
        "form": form,
        "layer": layer,
        "degradation": d,
        "ci_lo": d - 0.01,
        "ci_hi": d + 0.01,
        "nll": 2.0 + d,
        "nll_plain": 2.0,
    }


def _pred(scheme: str, share: float, layer=None) -> dict:
    row = {
        "scheme": scheme,
        "r": 0.9,
        "share": share,
        "kl_explained": share,
        "kl_measured_predicted": 0.01,
        "measured_change": 0.1,
        "predicted_change": 0.09,
        "coverage": 0.95,
    }
    return row if layer is None else {**row, "layer": layer}


def profile(carries=True, share=0.8, rho=0.6, p=0.02, relation=True) -> dict:
    fit = 0.05 if carries else 0.5
    rel = [
        {
            "covariate": "predicted_change",
            "rho": rho,
            "p": p,
            "naive_p": 1e-3,
            "rho_changes": 0.5,
            "p_changes": p,
            "n_layers": 30,
            "null_size": 60,
        }
    ]
    return {
        "model": "m",
        "random_init": False,
        "documents": 12,
        "schemes": ["swap:0.05", "swap:0.2"],
        "forms": ["additive", "distance", "key"],
        "controls": ["foreign"],
        "nll": [
            _nll("additive", "all", fit),
            _nll("distance", "all", 0.3),
            _nll("key", "all", 0.4),
            _nll("foreign", "all", 0.2),
            *[_nll(f, k, 0.01 * k) for f in ("additive", "distance", "key") for k in range(3)],
        ],
        "prediction": [_pred("swap:0.05", share), _pred("swap:0.2", share)],
        "prediction_layers": [
            _pred(s, share, k) for s in ("swap:0.05", "swap:0.2") for k in range(3)
        ],
        "relation": rel if relation else [],
        "layers_run": {
            "path": "L",
            "scheme": "swap:0.2",
            "layers": [{"layer": k, "sensitivity": 0.1 * k} for k in range(3)],
            "all_layers": {"sensitivity": 1.0},
        }
        if relation
        else None,
    }


def test_the_answer_is_yes_only_when_all_three_checks_hold():
    assert answer(profile()) == "Yes"
    assert [c["holds"] for c in checks(profile())] == [True, True, True]


def test_the_answer_says_no_when_the_form_does_not_predict_or_track():
    assert answer(profile(share=0.3)) == "No"
    assert answer(profile(p=0.3)) == "No"
    assert answer(profile(rho=-0.6)) == "No"


def test_the_answer_is_partly_when_only_the_replacement_costs_too_much():
    assert answer(profile(carries=False)) == "Partly"


def test_an_untested_check_is_said_so():
    prof = profile(relation=False)
    assert answer(prof) == "Not answered (a check was not run)"
    assert checks(prof)[2]["holds"] is None
    text = render_markdown([prof])
    assert "not tested" in text and "Against the sensitivity profile" not in text


def test_markdown_and_figure_render():
    text = render_markdown([profile(), profile(share=0.3)], cross="## Across models")
    assert text.count("## m") == 2 and "## Across models" in text
    assert "| 2 | 0.02 [0.01, 0.03]" in text  # one layer at a time, its interval
    assert cause_figure([profile(), profile(relation=False)]).startswith(b"\x89PNG")


def test_a_relation_test_not_estimable_is_not_tested_not_failed():
    """With too few layers the mirror-shift test of changes has no p: *tracks* is not
    tested, and the answer does not say no on its account."""
    prof = profile()
    prof["relation"][0].update(rho_changes=float("nan"), p_changes=float("nan"))
    tracks = checks(prof)[2]
    assert tracks["holds"] is None and "not estimable" in tracks["text"]
    assert answer(prof) == "Not answered (a check was not run)"


def test_a_learned_absolute_model_has_no_prediction_and_says_why():
    """Its cells are reported; the prediction and the relation do not apply (positions
    enter once, before the first layer), whatever the cells say; the figure draws the
    cells' panel beside a model that predicts."""
    prof = {
        **profile(relation=False),
        "positions": "absolute",
        "schemes": [],
        "prediction": [],
        "prediction_layers": [],
    }
    assert answer(prof) == "Not answered (no prediction for learned absolute positions)"
    carries, predicts, tracks = checks(prof)
    assert carries["holds"] is True and predicts["holds"] is None and tracks["holds"] is None
    assert predicts["text"].startswith("does not apply: this model's learned absolute")
    text = render_markdown([prof])
    assert text.count("Not made: this model's learned absolute positions enter once") == 1
    assert "| scheme |" not in text and "| additive (every layer) |" in text
    assert cause_figure([profile(), prof]).startswith(b"\x89PNG")
