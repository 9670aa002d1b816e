"""The report and `posgen report` / `posgen compare` on planted runs (unit tier)."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest

from posgen.results.report.build import regenerate
from synthetic_run import cli, make_run

pytestmark = pytest.mark.heavy

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
    # tolerance, curves, common realised axis and a heatmap per model, the scatter
    assert html.count('src="data:image/png;base64,') == 9
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
    assert "Not estimable: 1 model(s)" in md  # the random-init twin is not counted


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
    assert corr["estimable"] and corr["n"] == 4 and corr["descriptive_only"]
    # planted: higher fit quality, less sensitivity -> lower AUC; exact p of 4 models
    assert corr["spearman"]["r"] == pytest.approx(-1.0)
    assert corr["spearman"]["p"] == pytest.approx(2 / 24) and corr["spearman"]["exact"]
    assert "ci_lo" not in corr["spearman"] and not corr["claim"]
    lo, hi = corr["spearman"]["doc_resampled"]["band"]
    assert -1.0 <= lo <= hi <= 1.0
    md = (tmp_path / "report.md").read_text()
    assert "Spearman ρ (exact p)" in md and "descriptive only" in md and "n ≤ 4" in md


def test_twins_are_shown_but_not_counted(tmp_path):
    models = {f"m{i}": {"sensitivity": 0.2 + i * 0.4, "fit": 0.8 - 0.15 * i} for i in range(3)}
    models |= {"m0+random-init": {"sensitivity": 3.0, "fit": 0.9, "random_init": True}}
    make_run(tmp_path, models)
    regenerate(tmp_path)
    scores = json.loads((tmp_path / "scores.json").read_text())
    corr = scores["cross_model"][0]
    assert corr["n"] == 3 and corr["twins"] == ["m0+random-init"]
    assert "m0+random-init" not in corr["models"]
    md = (tmp_path / "report.md").read_text()
    assert "3 (+1 twin)" in md
    table = md[md.index("## Models side by side") : md.index("## Fit quality vs")]
    rows = [r for r in table.splitlines() if r.startswith("| m") and not r.startswith("| model")]
    order = [r.split("|")[1].strip() for r in rows]
    assert order[:2] == ["m0", "m0+random-init"]  # the twin beside its model


def test_regenerating_gives_identical_scores(two_models):
    before = (two_models / "scores.json").read_bytes()
    regenerate(two_models)
    assert (two_models / "scores.json").read_bytes() == before


def test_report_of_a_missing_run_exits_2(tmp_path, capsys):
    assert cli(["report", str(tmp_path / "nope")]) == 2
    assert "folder not found" in capsys.readouterr().err


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


def test_accuracy_cells_show_the_consistency_rate(two_models):
    deg = pd.read_parquet(two_models / "degradation.parquet")
    acc = deg[(deg["metric"] == "acc") & (deg["model"] == "embedded")]
    assert acc["consistency"].between(0, 1).all() and (acc["consistency"] < 1).any()
    assert (acc["consistency_lo"] <= acc["consistency"]).all()
    assert deg[deg["metric"] == "word_perplexity"]["consistency"].isna().all()
    assert "choice unchanged [95% CI]" in (two_models / "report.md").read_text()


def test_regenerate_writes_the_length_tables_and_the_report_reads_them(tmp_path):
    from tests.results.scores.test_length_scores import CONFIG, _record

    from posgen.results.scores.length import score_length

    make_run(tmp_path, {"embedded": {"sensitivity": 1.0, "fit": 0.6}})
    records = [_record("none", d, [4, 3, 2, 2, 3, 3, 3, 3]) for d in "abc"]
    folder = tmp_path / "length" / "embedded"
    folder.mkdir(parents=True)
    (folder / "length_scores.json").write_text(json.dumps(score_length(records, CONFIG)))
    paths = regenerate(tmp_path)
    effective = pd.read_parquet(paths["length_effective"])
    assert effective[["model", "scheme", "effective_length"]].values.tolist() == [
        ["embedded", "none", 64]
    ]
    assert len(pd.read_parquet(paths["length_curves"])) == 8
    assert "## Length generalization: m" in (tmp_path / "report.md").read_text()


def test_report_remakes_a_length_folder_from_the_folder_alone(tmp_path, capsys):
    """``posgen report`` tells a length folder from a run folder (both keep config.json)
    and re-makes its scores and report from its records."""
    from synthetic_run import add_length

    folder = add_length(tmp_path, "tiny")
    assert not (folder / "length.md").exists()
    assert cli(["report", str(folder)]) == 0
    assert capsys.readouterr().out.strip() == f"posgen report: {folder / 'length.md'}"
    scores = json.loads((folder / "length_scores.json").read_text())
    assert {c["scheme"] for c in scores["curves"]} == {"none", "lambda:4,64", "scale:2.0"}
    assert (folder / "length_curves.png").read_bytes()[:4] == b"\x89PNG"
    (folder / "junk").mkdir()
    assert cli(["report", str(folder / "junk")]) == 2
    assert "is not a posgen folder" in capsys.readouterr().err
