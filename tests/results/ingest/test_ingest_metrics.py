"""Any lm-eval metric through ingest, report, baseline and check: exact match under two
filters, corpus metrics (TER, lower is better; MCC) and a metric posgen cannot score, from
real lm-eval output of posgen's own test tasks on a tiny model (integration tier)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from lm_eval_task_fixtures import evaluate, lm_eval_folder, task_folder
from posgen.results.folder.config import Scoring
from posgen.results.ingest.folders import ingest
from synthetic_run import cli

pytestmark = pytest.mark.heavy

RECALL, YESNO = "posgen_t_recall", "posgen_t_yesno"


@pytest.fixture(scope="module")
def ingested(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("metrics")
    model = tiny_model_dir("llama", 0)
    tasks = task_folder(root, model)
    outputs = {}
    for task in (RECALL, f"perm_swap_50pct_{RECALL}", YESNO, f"perm_swap_50pct_{YESNO}"):
        outputs[task] = evaluate(model, task, tasks)
    outputs["position"] = evaluate(model, YESNO, tasks, model="hf-posgen", positions="swap:0.5")
    for name, out in outputs.items():
        lm_eval_folder(out, root / "lm" / name)
    run = root / "run"
    # 50 bootstrap replicates keep the corpus intervals quick here (the CLI uses 200)
    ingest([root / "lm"], run, {**Scoring().to_dict(), "iters": 50})
    return run, outputs


def test_every_metric_and_filter_is_its_own_row_with_lm_evals_figure(ingested):
    run, outputs = ingested
    res = pd.read_parquet(run / "results.parquet")
    base = res[(res["task"] == RECALL) & (res["kind"] == "none")].set_index(["metric", "filter"])
    reported = outputs[RECALL]["results"][RECALL]
    for metric in ("exact_match", "ter"):
        for filt in ("strict-match", "flexible-extract"):
            assert base.loc[(metric, filt), "value"] == pytest.approx(reported[f"{metric},{filt}"])
    assert "bypass" not in set(res["metric"])  # not scored: named instead (below)
    assert dict(zip(base["aggregation"], base["higher_is_better"], strict=False))["ter"] is False


def test_degradation_follows_each_metrics_direction_and_unit(ingested):
    run, _ = ingested
    res = pd.read_parquet(run / "results.parquet").set_index(["task", "metric", "filter", "kind"])
    degr = pd.read_parquet(run / "degradation.parquet")
    degr = degr[degr["task"] == RECALL].set_index(["metric", "filter"])
    for filt in ("strict-match", "flexible-extract"):
        em = degr.loc[("exact_match", filt)]
        drop = res.loc[(RECALL, "exact_match", filt, "none"), "value"]
        drop -= res.loc[(RECALL, "exact_match", filt, "text"), "value"]
        assert em["degradation"] == pytest.approx(drop) and em["unit"] == "fraction"
        ter = degr.loc[("ter", filt)]
        rise = res.loc[(RECALL, "ter", filt, "text"), "value"]
        rise -= res.loc[(RECALL, "ter", filt, "none"), "value"]
        assert ter["degradation"] == pytest.approx(rise)  # lower is better: a rise is worse
        assert ter["interval"] == "bootstrap-percentile" and ter["unit"] == "metric"
    # the planted targets: the perturbed prompts break some of the unperturbed matches
    assert (degr.loc["exact_match", "degradation"] > 0).all()
    yesno = pd.read_parquet(run / "degradation.parquet").query("task == @YESNO")
    assert {(m, k) for m, k in zip(yesno["metric"], yesno["kind"], strict=True)} == {
        (m, k) for m in ("acc", "mcc") for k in ("text", "position")
    }


def test_the_report_names_unscored_metrics_and_shows_generations(ingested, capsys):
    run, _ = ingested
    assert cli(["report", str(run)]) == 0  # the config's 50 replicates: quick
    err = capsys.readouterr().err
    assert f"{RECALL} / bypass (strict-match) not scored: lm-eval's bypass" in err
    # the task's own aggregation function: its YAML is not where lm-eval's tasks are
    assert f"{RECALL} / chrf (flexible-extract) not scored: its aggregation is a Python " in err
    assert "(share_identical) that posgen could not load" in err and "--include-path" in err
    report = (run / "report.md").read_text()
    assert "## Metrics not scored" in report and "bypass (flexible-extract)" in report
    assert "| generation |" in report and "| flexible-extract extracts |" in report
    assert "exact_match (strict-match)" in report and "ter (flexible-extract)" in report
    scores = json.loads((run / "scores.json").read_text())
    recall = {s["metric"] + "," + s["filter"]: s for s in scores["metrics"][RECALL]}
    assert recall["bypass,strict-match"]["rule"] is None
    assert recall["ter,flexible-extract"]["rule"] == "corpus"


def test_baseline_and_check_pair_the_ingested_run_with_itself(ingested, tmp_path, capsys):
    run, _ = ingested
    baseline = tmp_path / "baseline.json"
    assert cli(["baseline", str(run), "-o", str(baseline)]) == 0
    data = json.loads(baseline.read_text())
    # each task's primary (metric, filter): exact match under its first filter, in points
    gated = {(c["task"], c["metric"], c["lm_eval_key"], c["scale"]) for c in data["cells"]}
    assert gated == {
        (RECALL, "exact_match (strict-match)", "exact_match,strict-match", "accuracy"),
        (YESNO, "acc", "acc,none", "accuracy"),
    }
    base = {e["task"]: e for e in data["base"]}
    assert base[RECALL]["larger_is_better"] and base[RECALL]["scale"] == "accuracy"
    assert set(base[RECALL]["docs"]["v"]) <= {0.0, 1.0}
    capsys.readouterr()
    assert cli(["check", str(run), "--baseline", str(baseline)]) == 0
    out = capsys.readouterr().out
    assert f"{RECALL}/exact_match (strict-match)/text/swap@0.5" in out


def test_ingest_with_the_tasks_folder_scores_the_tasks_own_aggregation(ingested, capsys):
    run, _ = ingested
    again = run.parent / "run-with-tasks"
    tasks = run.parent / "tasks"
    argv = ["ingest", str(run.parent / "lm"), "--out", str(again), "--include-path", str(tasks)]
    assert cli(argv) == 0
    assert "chrf" not in capsys.readouterr().err  # scored: no note
    config = json.loads((again / "config.json").read_text())["config"]
    assert config["include_path"] == [str(tasks.resolve())]
    scores = json.loads((again / "scores.json").read_text())
    recall = {s["metric"] + "," + s["filter"]: s for s in scores["metrics"][RECALL]}
    assert recall["chrf,flexible-extract"]["rule"] == "corpus"
