"""The worst case over perturbation seeds (``--seeds K``): perdoc column, baseline,
``posgen check --statistic worst`` and the report panel (unit tier: no model)."""

from __future__ import annotations

import json

import numpy as np
import pytest

from synthetic_run import cli, make_run

pytestmark = pytest.mark.heavy

MODEL = {"embedded": {"sensitivity": 1.0, "fit": 0.6}}


@pytest.fixture(scope="module")
def three_draws(tmp_path_factory):
    root = tmp_path_factory.mktemp("worst")
    make_run(root / "base", MODEL, seed=1, draws=3)
    assert cli(["baseline", str(root / "base"), "-o", str(root / "b.json")]) == 0
    return root


def test_each_documents_worst_delta_over_its_draws_is_a_column(three_draws):
    from posgen.results.scores.run import load_scores

    _, scores = load_scores(three_draws / "base")
    perdoc = scores["perdoc"]
    cell = perdoc[(perdoc["kind"] == "position") & (perdoc["rate"] == 0.2)]
    assert sorted(set(cell["seed"])) == [1, 2, 3]
    want = cell.groupby(["metric", "doc_key"])["delta"].transform("max")
    assert np.array_equal(cell["delta_worst"].to_numpy(), want.to_numpy())
    assert (cell["delta_worst"] > cell["delta"]).any()


def test_the_baseline_stores_the_worst_beside_the_mean(three_draws):
    data = json.loads((three_draws / "b.json").read_text())
    assert data["pairing"]["seeds"] == 3
    for c in data["cells"]:
        g, worst = np.array(c["docs"]["g"]), np.array(c["docs"]["g_worst"])
        assert (worst >= g - 1e-12).all()
    prose = next(c for c in data["cells"] if c["metric"] == "word_perplexity")
    assert (np.array(prose["docs"]["g_worst"]) > np.array(prose["docs"]["g"])).any()


def test_check_gates_on_the_mean_or_the_worst(three_draws, tmp_path, capsys):
    make_run(tmp_path / "weak", {"embedded": {"sensitivity": 1.6, "fit": 0.6}}, seed=1, draws=3)
    base = ["--baseline", str(three_draws / "b.json")]
    for statistic in ("mean", "worst"):
        assert cli(["check", str(three_draws / "base"), *base, "--statistic", statistic]) == 0
        assert f"statistic {statistic}" in capsys.readouterr().out
        assert cli(["check", str(tmp_path / "weak"), *base, "--statistic", statistic]) == 1
    out = capsys.readouterr().out
    assert "statistic worst" in out and "FAIL" in out


def test_the_report_shows_mean_and_worst_side_by_side(three_draws):
    from posgen.results.report.build import regenerate

    paths = regenerate(three_draws / "base")
    md = paths["md"].read_text() if "md" in paths else (three_draws / "base/report.md").read_text()
    panel = md[md.index("## Mean and worst case over 3 seeds") :]
    assert "| mean over seeds | worst |" in panel
    rows = [r for r in panel.splitlines() if r.startswith("| embedded | posgen_prose")]
    assert len(rows) == 8  # 3 text + 3 position + 2 feature cells
    mean, worst = (float(x) for x in rows[0].split("|")[6:8])
    assert worst > mean


def test_one_seed_has_no_worst_case_panel(tmp_path):
    from posgen.results.report.build import regenerate

    make_run(tmp_path / "one", MODEL, seed=1)
    regenerate(tmp_path / "one")
    assert "Mean and worst case" not in (tmp_path / "one/report.md").read_text()
