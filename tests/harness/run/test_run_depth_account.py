"""``posgen run --kinds depth`` writes the decomposition's account of the depth curve per
model (random-init twin included), resumes it, reports it; a run without depth cells
writes none."""

from __future__ import annotations

from dataclasses import replace

import pandas as pd
import pytest

from posgen.harness.run.sweep import accounted_models
from posgen.results.folder.config import DepthSweep
from posgen.results.folder.run_store import RunStore
from posgen.results.scores.depth_account import LOGIT_FORMS, MASS_FORMS
from synthetic_run import cli

pytestmark = pytest.mark.heavy

ARGS = ["--kinds", "depth", "--suite", "posgen_kv", "--depths", "0,0.5,1", "--limit", "2"]
ARGS += ["--depth-account"]


def run(model, out) -> int:
    return cli(["run", "--model", str(model), *ARGS, "--random-init", "--no-progress",
                "--out", str(out)])  # fmt: skip


@pytest.fixture(scope="module")
def account_run(tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("account") / "run"
    assert run(tiny_model_dir("llama", 0), out) == 0
    return out


def test_the_account_of_each_model_and_its_twin_is_written_and_reported(account_run):
    folder = account_run / "depth_account"
    values = [pd.read_parquet(p) for p in sorted(folder.glob("*.values.parquet"))]
    masses = [pd.read_parquet(p) for p in sorted(folder.glob("*.mass.parquet"))]
    assert sorted(v["random_init"].iloc[0] for v in values) == [False, True]
    for v, m in zip(values, masses, strict=True):
        assert set(v["form"]) == set(LOGIT_FORMS) and set(v["depth"]) == {0.0, 0.5, 1.0}
        assert len(v) == len(LOGIT_FORMS) * 3 * 2  # forms × depths × documents
        assert set(MASS_FORMS) <= set(m.columns)
        assert m[list(MASS_FORMS)].ge(0).all().all() and m[list(MASS_FORMS)].le(1).all().all()
        assert (m["evidence_tokens"] > 0).all() and (m["question_tokens"] > 0).all()
    report = (account_run / "report.md").read_text()
    section = report[report.index("### The decomposition's account") :]
    assert "Question to evidence mass: posgen_kv" in section
    assert "/ posgen_kv / gold NLL: " in section and "mass gap over layers: measured" in section


def test_a_rerun_keeps_the_account(account_run, tiny_model_dir):
    before = {p: p.stat().st_mtime_ns for p in (account_run / "depth_account").iterdir()}
    assert len(before) == 4
    assert run(tiny_model_dir("llama", 0), account_run) == 0
    after = {p: p.stat().st_mtime_ns for p in (account_run / "depth_account").iterdir()}
    assert before == after


def test_only_a_run_with_a_log_likelihood_depth_task_accounts(account_run):
    config = RunStore.open(account_run).run_config
    assert len(accounted_models(config)) == 2  # the model and its twin
    assert accounted_models(replace(config, depth=None)) == []
    gen = replace(config, depth=DepthSweep((0.0, 0.5, 1.0), ("posgen_kv_gen",), 8))
    assert accounted_models(gen) == []
    asked_not = replace(config, depth=DepthSweep((0.0, 0.5, 1.0), ("posgen_kv",)))
    assert accounted_models(asked_not) == []  # without --depth-account
