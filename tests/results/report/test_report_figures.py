"""The run report's figures: none that can show nothing, one swept scale, axes held to the
curves, and a first section with one line and one figure per model (unit tier: planted
runs and tables, no model). What a figure draws is read from the record posgen writes
into each PNG (``posgen.results.report.figure_record``)."""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from posgen.results.folder.metrics import MetricSpec
from posgen.results.report import plots
from posgen.results.report.build import regenerate
from posgen.results.report.figure_record import problems, read_record
from synthetic_run import RATES, SIGMAS, make_run

pytestmark = pytest.mark.heavy


def _models(n: int) -> dict[str, dict]:
    return {f"m{i}": {"sensitivity": 0.2 + i * 0.4, "fit": 0.8 - 0.15 * i} for i in range(n)}


def _report(root: Path, n: int, **kw) -> tuple[str, dict[str, dict], Path]:
    """A planted run of ``n`` models, reported: its report.md, each figure's record by
    its title, and the run folder."""
    make_run(root, _models(n), **kw)
    regenerate(root)
    md = (root / "report.md").read_text()
    figures = dict(re.findall(r"!\[([^\]]*)\]\((plots/[^)]+)\)", md))
    records = {title: read_record((root / path).read_bytes()) for title, path in figures.items()}
    return md, records, root


@pytest.fixture(scope="module")
def one_model(tmp_path_factory):
    return _report(tmp_path_factory.mktemp("one") / "run", 1)


@pytest.fixture(scope="module")
def three_models(tmp_path_factory):
    return _report(tmp_path_factory.mktemp("three") / "run", 3)


def test_one_model_has_no_cross_model_figure_and_says_why(one_model):
    md, records, _ = one_model
    assert not [t for t in records if "fit quality" in t and "vs" in t.lower()]
    assert "No figure of degradation against fit quality" in md and "this run has 1." in md
    for title, record in records.items():
        assert problems(record) == [], title


def test_three_models_get_the_cross_model_figure_with_every_model(three_models):
    md, records, _ = three_models
    record = records["Degradation vs fit quality"]
    assert all(ax["scatter"] == 3 for ax in record["axes"])  # a point per model
    assert "No figure of degradation against fit quality" not in md
    for title, rec in records.items():
        assert problems(rec) == [], title


def test_no_panel_for_a_kind_that_was_not_run(tmp_path):
    _, records, _ = _report(tmp_path / "run", 1, kinds=("text",))
    panels = [ax for record in records.values() for ax in record["axes"]]
    assert panels and not [ax for ax in panels if "σ" in ax["xlabel"] or "σ" in ax["title"]]
    assert not [ax for ax in panels if "feature" in ax["title"] or "position" in ax["title"]]
    curves = records["Degradation curves: m0"]["axes"]
    assert len(curves) == 2  # one rate panel per task, no σ column
    for title, record in records.items():
        assert problems(record) == [], title


def _rate_panels(records: dict[str, dict], what: str) -> list[tuple[str, dict]]:
    return [
        (title, ax)
        for title, record in records.items()
        for ax in record["axes"]
        if ax["xlabel"].startswith(what)
    ]


@pytest.mark.parametrize(
    ("what", "amounts"), [("rate applied", RATES), ("σ applied", SIGMAS)], ids=["rate", "sigma"]
)
def test_every_swept_axis_is_one_symlog_scale_with_zero_and_the_amounts_run(
    three_models, what, amounts
):
    _, records, _ = three_models
    panels = _rate_panels(records, what)
    figures = {title for title, _ in panels}
    assert len(figures) >= 4, figures  # each model's tolerance figure and its curves
    ticks = ["0", *(f"{a:g}" for a in amounts)]
    for title, ax in panels:
        assert ax["xscale"] == "symlog", title
        assert ax["xticks"] == ticks, title  # 0 labelled, then exactly the amounts run
        assert ax["xlim"][0] < 0.0 < ax["xlim"][1]  # the unperturbed point is inside
        assert f"linear from 0 to {amounts[0]:g}, log above" in ax["xlabel"]
    # the SAME scale on every figure: parameters, limits and ticks
    scales = {(ax["linthresh"], ax["linscale"], tuple(ax["xlim"])) for _, ax in panels}
    assert len(scales) == 1 and next(iter(scales))[0] == amounts[0]


def _curves(ci_hi_at_02: float) -> tuple[pd.DataFrame, pd.DataFrame]:
    """One model's perplexity curve, points under 0.1, with ``ci_hi`` at rate 0.2 set."""
    rows = [
        (0.01, 0.002, -0.01, 0.015),
        (0.05, 0.02, 0.0, 0.04),
        (0.2, 0.06, 0.01, ci_hi_at_02),
        (0.5, 0.08, 0.03, 0.14),
    ]
    degr = pd.DataFrame(
        [
            dict(
                model="m", task="t", metric="word_perplexity", filter="none", kind="position",
                scheme="swap", rate=r, degradation=d, ci_lo=lo, ci_hi=hi, unit="relative",
            )
            for r, d, lo, hi in rows
        ]
    )  # fmt: skip
    tol = pd.DataFrame([dict(model="m", task="t", metric="word_perplexity", filter="none")])
    return degr, tol.assign(threshold=0.1)


def test_a_wide_interval_is_marked_at_the_edge_not_stretching_the_axis():
    from posgen.results.report.swept_axis import swept_axes

    spec = MetricSpec("word_perplexity", "none", "weighted_perplexity", False)
    degr, tol = _curves(ci_hi_at_02=8.0)  # +800 %: a wide interval at few documents
    swept = swept_axes(zip(degr["kind"], degr["scheme"], degr["rate"], strict=True))
    record = read_record(plots.degradation_curves(degr, tol, "m", [("t", spec)], swept))
    (ax,) = record["axes"]
    bottom, top = ax["ylim"]
    assert 0.1 < top < 0.3 and -0.05 < bottom < 0  # held to the points, not stretched to 8
    assert ax["clipped"] == 1 and ax["clipped_bounds"] == ["+800%"]  # marked, bound written
    assert ax["yscale"] == "function"  # a perplexity ratio on log(1 + D)
    assert ax["xticks"] == ["0", "0.01", "0.05", "0.2", "0.5"]
    # a moderate interval shows whole: nothing marked
    degr, tol = _curves(ci_hi_at_02=0.11)
    record = read_record(plots.degradation_curves(degr, tol, "m", [("t", spec)], swept))
    assert record["axes"][0]["clipped"] == 0 and record["axes"][0]["ylim"][1] > 0.14


def _first_section(md: str) -> str:
    start = md.index("\n## ")
    return md[start : md.index("\n## ", start + 1)]


def test_the_first_section_gives_one_line_and_one_figure_per_model(three_models):
    md, records, _ = three_models
    section = _first_section(md)
    assert section.startswith("\n## How position-tolerant is each model")
    table = [r for r in section.splitlines() if r.startswith("| ")]
    header, lines = table[0], table[1:]
    assert [r.split("|")[1].strip() for r in lines] == ["m0", "m1", "m2"]  # one line each
    cols = [c.strip() for c in header.split("|")[1:-1]]
    assert cols == ["model", "fit r (3-axis)", "posgen_prose", "posgen_cloze"]  # task order
    assert "posgen_prose: word_perplexity, +10% PPL; posgen_cloze: acc, -0.05 acc." in section
    amount = r"≥?[\d.]+"
    tolerance = rf"{amount} \[{amount}, {amount}\]"
    for line in lines:
        cells = [c.strip() for c in line.split("|")[1:-1]]
        assert re.fullmatch(r"0\.\d{3}", cells[1])  # the fit's r beside the tolerances
        for cell in cells[2:]:  # each task: every perturbation's tolerance [range]
            parts = cell.split("; ")
            assert [p.split(":")[0] for p in parts] == [
                "text swap",
                "position swap",
                "feature rope_noise",
            ]
            assert all(re.fullmatch(rf"[a-z_ ]+: {tolerance}", p) for p in parts), cell
    figures = re.findall(r"!\[(Position tolerance and fit quality: m\d)\]", section)
    assert figures == [f"Position tolerance and fit quality: m{i}" for i in range(3)]
    fig = records["Position tolerance and fit quality: m0"]
    assert [ax["title"] for ax in fig["axes"]] == [
        "tolerance [range]: rate",
        "tolerance [range]: σ",
        "fit quality",
    ]


def test_the_first_sections_line_quotes_the_tolerance_table(three_models):
    """The line's figures are the scores' own: tolerance [tolerance_lo, tolerance_hi]."""
    md, _, root = three_models
    tol = pd.read_parquet(root / "tolerance.parquet")
    row = tol[(tol["model"] == "m1") & (tol["task"] == "posgen_prose")]
    row = row[(row["kind"] == "position") & (row["metric"] == "word_perplexity")].iloc[0]
    shown = [
        ("≥" if v >= row["max_rate"] else "") + f"{v:g}"
        for v in row[["tolerance", "tolerance_lo", "tolerance_hi"]]
    ]
    line = next(r for r in _first_section(md).splitlines() if r.startswith("| m1 "))
    prose = line.split("|")[3]
    assert f"position swap: {shown[0]} [{shown[1]}, {shown[2]}]" in prose
