"""The report and `posgen report` / `posgen compare` on planted runs (unit tier)."""

from __future__ import annotations

import json
import re

import pytest
from synthetic_run import cli, make_run

from posgen.results.report import regenerate

TWO = {
    "embedded": {"sensitivity": 1.0, "fit": 0.6},
    "embedded+random-init": {"sensitivity": 0.1, "fit": 0.2, "random_init": True},
}


@pytest.fixture(scope="module")
def two_models(tmp_path_factory):
    root = tmp_path_factory.mktemp("report") / "run"
    make_run(root, TWO)
    assert cli(["report", str(root)]) == 0
    return root


def test_report_files_and_self_contained_html(two_models):
    html = (two_models / "report.html").read_text()
    # curves, common realised axis and a heatmap per model, the scatter
    assert html.count('src="data:image/png;base64,') == 7
    assert not re.search(r'src="(?!data:)', html) and "<link" not in html
    md = (two_models / "report.md").read_text()
    for figure in re.findall(r"\]\((plots/[^)]+)\)", md):
        assert (two_models / figure).is_file()
    assert "dequantized from a 4-bit" in md  # the embedded model's caveat
    assert "What is not shown" in md and "Seeds: perturbation 1234" in md


def test_summary_table_quotes_the_planted_difference(two_models):
    md = (two_models / "report.md").read_text()
    table = md[md.index("## Models side by side") : md.index("## Fit quality vs")]
    rows = {r.split("|")[1].strip(): r for r in table.splitlines() if r.startswith("| embedded")}
    assert set(rows) == {"embedded", "embedded+random-init"}
    # planted: the trained model degrades 10x faster, so it tolerates less
    pos = table.splitlines()[4].split("|")[1:-1]
    header = [h.strip() for h in pos]
    i = header.index("position tolerance")
    trained = rows["embedded"].split("|")[1:-1][i].strip()
    twin = rows["embedded+random-init"].split("|")[1:-1][i].strip()
    assert float(trained) < float(twin)
    assert "Not estimable: 2 model(s)" in md


def test_three_models_give_correlations_with_n_and_ci(tmp_path):
    models = {f"m{i}": {"sensitivity": 0.2 + i * 0.4, "fit": 0.8 - 0.15 * i} for i in range(4)}
    make_run(tmp_path, models)
    regenerate(tmp_path)
    scores = json.loads((tmp_path / "scores.json").read_text())
    corr = next(
        c
        for c in scores["cross_model"]
        if c["task"] == "posgen_prose" and c["kind"] == "position" and c["y"] == "auc"
    )
    assert corr["estimable"] and corr["n"] == 4
    # planted: higher fit quality, less sensitivity -> lower AUC
    assert corr["spearman"]["r"] == pytest.approx(-1.0)
    assert "Spearman [95% CI]" in (tmp_path / "report.md").read_text()


def test_regenerating_gives_identical_scores(two_models):
    before = (two_models / "scores.json").read_bytes()
    regenerate(two_models)
    assert (two_models / "scores.json").read_bytes() == before


def test_report_of_a_missing_run_exits_2(tmp_path, capsys):
    assert cli(["report", str(tmp_path / "nope")]) == 2
    assert "run folder not found" in capsys.readouterr().err


def test_compare_prints_differences(two_models, tmp_path, capsys):
    other = {**TWO, "embedded": {"sensitivity": 2.0, "fit": 0.6}}
    make_run(tmp_path / "b", other, seed=99)
    assert cli(["compare", str(two_models), str(tmp_path / "b")]) == 0
    out = capsys.readouterr().out
    assert "seed: 1234 -> 99" in out
    line = next(
        x
        for x in out.splitlines()
        if x.strip().startswith("embedded ")
        and "position" in x
        and " 0.5 " in x
        and "word_perplexity" in x
    )
    assert line.endswith("*")  # the doubled sensitivity is outside both CIs
    assert "tolerance A" in out
