"""``posgen run --kinds depth`` on a tiny model: the evidence-depth cells of both forms,
kept out of the rate axes and scored in the report's depth section; its input checks."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from synthetic_run import cli

pytestmark = pytest.mark.heavy

DEPTH_TASKS = ("posgen_kv", "posgen_kv_mc", "posgen_kv_gen", "posgen_passage_qa")
ARGS = ["--kinds", "text,depth", "--rates", "0,0.5", "--depths", "0,1", "--limit", "2"]


def run(model, out, *extra: str) -> int:
    return cli(["run", "--model", str(model), *ARGS, "--no-progress", "--out", str(out), *extra])


@pytest.fixture(scope="module")
def depth_run(tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("depth") / "run"
    assert run(tiny_model_dir("llama", 0), out) == 0
    return out


def test_a_depth_run_writes_the_depth_cells_of_both_forms(depth_run):
    res = pd.read_parquet(depth_run / "results.parquet")
    depth = res[res["scheme"] == "depth"]
    cells = set(
        zip(depth["task"], depth["kind"], depth["rate"], depth["lm_eval_task"], strict=True)
    )
    for task in DEPTH_TASKS:
        for d, pct in ((0.0, "0pct"), (1.0, "100pct")):
            assert (task, "text", d, f"perm_depth_{pct}_{task}") in cells
            assert (task, "position", d, task) in cells  # the unmoved task, ids moved
    # depth 0 is a cell of its own (the evidence first), not the baseline
    assert (depth["rate"] == 0.0).any()
    assert set(res[res["kind"] == "none"]["task"]) >= set(DEPTH_TASKS)
    config = json.loads((depth_run / "config.json").read_text())["config"]
    assert config["depth"] == {"depths": [0.0, 1.0], "tasks": list(DEPTH_TASKS)}
    per = pd.read_parquet(depth_run / "perdoc.parquet")
    assert {"text", "position"} <= set(per[per["scheme"] == "depth"]["kind"])


def test_depth_cells_stay_out_of_the_rate_axes_and_go_to_the_depth_section(depth_run):
    scores = json.loads((depth_run / "scores.json").read_text())
    for table in ("degradation", "tolerance"):
        assert scores[table], f"{table} is empty: the text rate cells should be there"
        assert all(r["scheme"] != "depth" for r in scores[table]), table
    report = (depth_run / "report.md").read_text()
    assert "## Evidence depth (lost in the middle)" in report
    start = report.index("## Tolerance per metric and perturbation")
    end = report.index("## Evidence depth")
    assert "depth" not in report[start:end].replace("Evidence depth", "")


def test_a_rerun_resumes_and_keeps_every_depth_cell(depth_run, tiny_model_dir):
    before = {p: p.stat().st_mtime_ns for p in (depth_run / "cells").rglob("*.json")}
    assert any("depth" in p.name for p in before)
    assert run(tiny_model_dir("llama", 0), depth_run) == 0
    assert before == {p: p.stat().st_mtime_ns for p in (depth_run / "cells").rglob("*.json")}


@pytest.mark.parametrize(
    "args,message",
    [
        (["--kinds", "depth", "--depths", "0,1.5"], "--depths: every depth must be in [0, 1]"),
        (["--kinds", "depth", "--depths", "-0.1"], "--depths: every depth must be in [0, 1]"),
        (["--kinds", "depth", "--depths", "a"], "--depths: 'a' is not a comma-separated"),
        (["--depths", "0,1"], "--depths needs --kinds depth"),
        (["--kinds", "depth", "--suite", "posgen_prose"], "declares no metadata.posgen_depth"),
        (["--depth-account"], "--depth-account needs --kinds depth"),
        (["--kinds", "depth", "--depth-account", "0"], "documents per task must be at least 1"),
        (
            ["--kinds", "depth", "--suite", "posgen_kv_gen", "--depth-account"],
            "--depth-account: the account runs on the built-in log-likelihood depth tasks",
        ),
    ],
)
def test_bad_depth_input_is_refused_before_any_model_loads(
    tmp_path, monkeypatch, capsys, args, message
):
    from posgen.harness.run import cells as sweep_cells

    def refuse(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(sweep_cells.ModelSession, "__enter__", refuse)
    assert cli(["run", *args, "--out", str(tmp_path / "out")]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()
