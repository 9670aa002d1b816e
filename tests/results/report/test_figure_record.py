"""The record of what a figure draws (written into its PNG) and the browser check of a
report that reads it (benchmarks/check_report_browser.py): both must really fail on an
empty panel and on a figure that does not load."""

from __future__ import annotations

import importlib.util
import io
import shutil
from pathlib import Path

import pytest

from posgen.results.report.figure_record import png_bytes, problems, read_record
from posgen.results.report.plots import new_figure
from posgen.results.report.render import render_html

CHECK = Path(__file__).resolve().parents[3] / "benchmarks" / "check_report_browser.py"


def _curve_png() -> bytes:
    fig, axes = new_figure()
    ax = axes[0][0]
    ax.plot([0.0, 0.1, 0.5], [0.0, 0.02, 0.3], marker="o")
    ax.fill_between([0.0, 0.1, 0.5], [0.0, 0.01, 0.2], [0.0, 0.03, 0.4], alpha=0.2)
    ax.set_xlabel("rate applied")
    ax.set_ylabel("relative increase")
    return png_bytes(fig)


def _empty_panel_png() -> bytes:
    """A panel as the report once drew for a kind not run: reference lines, a note."""
    fig, axes = new_figure(1, 2)
    axes[0][0].plot([0.0, 1.0], [0.0, 0.1])
    axes[0][1].axhline(0.0, color="grey")
    axes[0][1].axhline(0.1, ls=":")
    axes[0][1].text(0.5, 0.5, "not run", transform=axes[0][1].transAxes)
    axes[0][1].set_title("feature")
    for ax in axes[0]:
        ax.set_xlabel("σ")
        ax.set_ylabel("drop")
    return png_bytes(fig)


def test_the_record_counts_what_each_panel_draws():
    record = read_record(_curve_png())
    (ax,) = record["axes"]
    assert ax["points"] == 3 and ax["bands"] == 1 and ax["xlabel"] == "rate applied"
    assert problems(record) == []


def test_an_empty_panel_a_lone_point_a_missing_label_and_no_record_are_problems():
    assert problems(read_record(_empty_panel_png())) == ["panel 2 (feature) draws nothing"]
    fig, axes = new_figure()
    axes[0][0].scatter([0.6], [0.1])  # one model on a cross-model panel
    axes[0][0].set_xlabel("fit r")
    assert problems(read_record(png_bytes(fig))) == [
        "panel 1 (untitled) draws a single point: nothing to compare it with",
        "panel 1 (untitled) has no y axis label",
    ]
    fig, axes = new_figure()
    axes[0][0].plot([0, 1], [0, 1])
    buf = io.BytesIO()
    fig.savefig(buf, format="png")  # a PNG written without the record
    assert read_record(buf.getvalue()) is None
    assert problems(None) == [
        "no record of what it draws (a figure from before posgen recorded them)"
    ]


@pytest.mark.skipif(shutil.which("chromium") is None, reason="no Chromium on this machine")
def test_the_browser_check_fails_on_an_unloaded_figure_and_an_empty_panel(tmp_path, capsys):
    spec = importlib.util.spec_from_file_location("check_report_browser", CHECK)
    check = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(check)
    good = [("h", 1, "report"), ("img", "curve", _curve_png())]
    (tmp_path / "good").mkdir()
    (tmp_path / "good" / "report.html").write_text(render_html(good, "good"))
    bad = [
        *good,
        ("img", "broken", b"\x89PNG\r\n\x1a\nnot a png"),
        ("img", "empty", _empty_panel_png()),
    ]
    (tmp_path / "bad").mkdir()
    (tmp_path / "bad" / "report.html").write_text(render_html(bad, "bad"))
    assert check.main([f"good={tmp_path / 'good'}"]) == 0
    assert check.main([f"bad={tmp_path / 'bad'}"]) == 1
    out = capsys.readouterr().out
    assert "figure 2 (broken) did not load in the browser" in out
    assert "figure 3 (empty): panel 2 (feature) draws nothing" in out
