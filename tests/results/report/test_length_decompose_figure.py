"""The drift / decomposition figure of posgen length --decompose: every panel on the same
scales, so a scheme whose drift is ten times smaller looks ten times smaller."""

from __future__ import annotations

from posgen.results.report.length_decompose import decomposition_figure, decomposition_png


def _scores(scale_by_scheme):
    layers = [
        {
            "scheme": scheme,
            "layer": k,
            "drift": scale * (k - 1.5),
            "r_3axis_before_context": 0.9 - 0.01 * k,
            "r_3axis_past_context": None if k == 0 else 0.8 + scale,
            "r_drop": 0.0,
            "a_trend_rms_past": None,
        }
        for scheme, scale in scale_by_scheme.items()
        for k in range(4)
    ]
    return {
        "config": {"model": "tiny"},
        "decomposition": {
            "layers": layers,
            "rank_correlation": {s: {"rho": 0.5, "n_layers": 4} for s in scale_by_scheme},
        },
    }


def test_panels_share_the_drift_and_r_scales():
    fig = decomposition_figure(_scores({"none": 0.1, "scale:2.0": 0.01}))
    left = [ax for ax in fig.axes if ax.get_ylabel() == "drift"]
    right = [ax for ax in fig.axes if ax.get_ylabel() == "r of the fit"]
    assert len(left) == len(right) == 2
    assert left[0].get_ylim() == left[1].get_ylim()
    assert right[0].get_ylim() == right[1].get_ylim()
    lo, hi = left[0].get_ylim()
    assert lo <= -0.15 and hi >= 0.15  # the larger scheme's drift fits on the shared axis
    assert [t.get_text() for t in fig.legends[0].get_texts()] == [
        "drift",
        "r past C",
        "r before C",
    ]


def test_png_is_written_when_every_value_of_a_column_is_missing():
    scores = _scores({"none": 0.1})
    for row in scores["decomposition"]["layers"]:
        row["r_3axis_past_context"] = None
    assert decomposition_png(scores)[:8] == b"\x89PNG\r\n\x1a\n"
