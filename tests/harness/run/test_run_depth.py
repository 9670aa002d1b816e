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
        (["--depth-lengths", "0.5"], "--depth-lengths needs --kinds depth"),
        (["--kinds", "depth", "--depth-lengths", "1.5"], "'1.5' is neither a fraction of"),
        (["--kinds", "depth", "--depth-lengths", "0.5,1"], "'1' is neither a fraction of"),
        (["--kinds", "depth", "--depth-lengths", "half"], "'half' is neither a fraction of"),
        (
            ["--kinds", "depth", "--suite", "posgen_prose", "--depth-lengths", "0.5"],
            "--depth-lengths: only the built-in depth tasks",
        ),
        (
            ["--kinds", "depth", "--depth-lengths", "0.5", "--depth-account"],
            "drop --depth-account or --depth-lengths",
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


@pytest.fixture(scope="module")
def long_context_dir(tmp_path_factory):
    """A tiny llama whose config says C = 2**20 (past every built-in task's pool)."""
    from tiny_models import save_short_context

    return save_short_context(tmp_path_factory.mktemp("long") / "llama", "llama", 2**20)


@pytest.mark.parametrize(
    "args,message",
    [
        (["--depth-lengths", "3"], "posgen_kv: 3 tokens is shorter than its 2-passage"),
        (
            ["--depth-lengths", "0.5,4096"],
            "'s trained context C = 2048 (max_position_embeddings); ask",
        ),
        (["--model", "{tiny}", "--depth-lengths", "0.5"], "one model per run"),
        (
            ["--model", "{long}", "--suite", "posgen_passage_qa", "--depth-lengths", "0.5"],
            "posgen_passage_qa: 524288 tokens is past what its items hold (48 passages",
        ),
    ],
)
def test_a_length_the_tokenizer_refuses_stops_before_any_model_loads(
    tiny_model_dir, long_context_dir, tmp_path, monkeypatch, capsys, args, message
):
    from posgen.harness.run import cells as sweep_cells

    def refuse(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(sweep_cells.ModelSession, "__enter__", refuse)
    models = ["--model", str(tiny_model_dir("llama", 0))]
    if "{long}" in args:  # the long-context model alone
        models, args = [], [str(long_context_dir) if a == "{long}" else a for a in args]
    args = [str(tiny_model_dir("llama", 1)) if a == "{tiny}" else a for a in args]
    argv = ["run", *models, "--kinds", "depth", *args, "--out", str(tmp_path / "out")]
    capsys.readouterr()  # the models' saving
    assert cli(argv) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
    assert not (tmp_path / "out").exists()


def test_depth_lengths_run_each_length_as_its_own_variant(tiny_model_dir, tmp_path):
    out = tmp_path / "run"
    argv = ["run", "--model", str(tiny_model_dir("llama", 0)), "--kinds", "depth"]
    argv += ["--depths", "0,1", "--depth-lengths", "0.125,512", "--suite", "posgen_kv"]
    assert cli([*argv, "--limit", "2", "--no-progress", "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())["config"]
    depth = config["depth"]
    variants = depth["tasks"]
    assert len(variants) == 2 and all(v.startswith("posgen_kv_n") for v in variants)
    assert [(x["asked"], x["target_tokens"], x["task"]) for x in depth["lengths"]] == [
        ("0.125", 256, variants[0]),
        ("512", 512, variants[1]),
    ]
    assert depth["context"] == 2048
    res = pd.read_parquet(out / "results.parquet")
    cells = set(zip(res["task"], res["kind"], res["rate"], res["lm_eval_task"], strict=True))
    for v in variants:
        assert (v, "none", 0.0, v) in cells
        for d, pct in ((0.0, "0pct"), (1.0, "100pct")):
            assert (v, "text", d, f"perm_depth_{pct}_{v}") in cells
            assert (v, "position", d, v) in cells
    per = pd.read_parquet(out / "perdoc.parquet")
    assert set(per[per["scheme"] == "depth"]["task"]) == set(variants)
    report = (out / "report.md").read_text()
    assert "posgen_kv at 0.125 C (n" in report and "posgen_kv at 512 tokens (n" in report
