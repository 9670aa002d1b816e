"""``posgen run`` under a data-parallel launch: 2 CPU processes (``accelerate launch``,
gloo) give the per-document values, scores and files of one process."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from posgen.harness.launch import Launch
from synthetic_run import cli

pytestmark = pytest.mark.heavy

BIN = Path(sys.executable).parent
# a trained tiny model and its random-init twin (a built model: HFLM's other path);
# 5 documents, so the ranks get 3 and 2
ARGS = ["--suite", "posgen_prose", "--rates", "0,0.5", "--sigmas", "0,2", "--limit", "5"]
ARGS += ["--quick", "--random-init", "--no-progress"]
TABLES = {
    "perdoc.parquet": ["model", "task", "metric", "kind", "scheme", "rate", "doc_key"],
    "results.parquet": ["model", "task", "metric", "kind", "scheme", "rate"],
    "degradation.parquet": ["model", "task", "metric", "kind", "scheme", "rate"],
    "tolerance.parquet": ["model", "task", "metric", "kind", "scheme"],
}
INGESTED_TABLES = ("perdoc.parquet", "degradation.parquet", "tolerance.parquet")


def test_one_process_is_rank_0_of_1_and_needs_no_collectives(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    launch = Launch.detect()
    assert (launch.rank, launch.world_size, launch.is_main) == (0, 1, True)
    assert launch.accelerator is None and launch.share({"a": 1}) == {"a": 1}
    launch.finish()


def launch_two(cwd: Path, port: int, *module_args: str) -> subprocess.CompletedProcess:
    """``accelerate launch`` of ``python -m MODULE ARGS`` on 2 CPU processes (gloo)."""
    env = {**os.environ, "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1"}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    src = str(Path(__file__).parents[3] / "src")  # this checkout's posgen first
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    cmd = [str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", "2"]
    cmd += ["--num_machines", "1", "--main_process_port", str(port), "-m", *module_args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def one_process(tiny_model_dir, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("one") / "run"
    assert cli(["run", "--model", str(tiny_model_dir("llama", 0)), *ARGS, "--out", str(out)]) == 0
    return out


def assert_tables_equal(a_run: Path, b_run: Path, keep=lambda df: df, names=tuple(TABLES)):
    for name in names:
        keys = TABLES[name]
        a = keep(pd.read_parquet(a_run / name)).sort_values(keys).reset_index(drop=True)
        b = pd.read_parquet(b_run / name).sort_values(keys).reset_index(drop=True)
        assert len(a) == len(b) > 0, name
        # a rank batches other documents together than one process does, so padding and
        # the shared-prefix logits cache differ: float32 logits move by ~1e-6 per word
        pd.testing.assert_frame_equal(b, a, check_exact=False, rtol=1e-5, atol=1e-5)


def files(run: Path) -> set[str]:
    """The run's files, lm-eval's date stamp in its file names blanked."""
    stamp = re.compile(r"_\d{4}-\d\d-\d\dT\d\d-\d\d-\d\d\.\d+\.json")
    return {
        stamp.sub("_<date>.json", str(p.relative_to(run))) for p in run.rglob("*") if p.is_file()
    }


@pytest.mark.slow
def test_two_cpu_processes_equal_one(one_process, tiny_model_dir, tmp_path):
    model = tiny_model_dir("llama", 0)
    two = tmp_path / "launch"
    two.mkdir()
    proc = launch_two(two, 29613, "posgen", "run", "--model", str(model), *ARGS, "--out", "run")
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.count("posgen run: report in") == 1  # rank 0 alone reports
    assert os.listdir(two) == ["run"]  # nothing written outside the run folder
    assert files(two / "run") == files(one_process)
    assert_tables_equal(one_process, two / "run")
    perdoc = pd.read_parquet(two / "run" / "perdoc.parquet")
    assert set(perdoc["kind"]) == {"text", "position", "feature"}
    assert not np.allclose(perdoc["delta"], 0)
    # the documents were sharded: rank 0's log shows its 3 of 5 requests per cell, and
    # no rank wrote its 2 there
    for log in (two / "run" / "raw").glob("*/lm_eval.log"):
        text = log.read_text()
        assert "Running loglikelihood requests:   0%|          | 0/3" in text
        assert "0/5 " not in text and "0/2 " not in text


@pytest.mark.slow
def test_ingest_of_launched_lm_eval_equals_one_process_run(one_process, tiny_model_dir, tmp_path):
    model = tiny_model_dir("llama", 0)
    common = ["--device", "cpu", "--limit", "5", "--batch_size", "8", "--log_samples"]
    text = ["--model", "hf", "--model_args", f"pretrained={model},dtype=float32"]
    text += ["--tasks", "posgen_prose,perm_swap_50pct_posgen_prose", "--output_path", "text"]
    pos_args = f"pretrained={model},dtype=float32,positions=swap:0.5,perturb_seed=1234"
    pos = ["--model", "hf-posgen", "--model_args", pos_args, "--tasks", "posgen_prose"]
    pos += ["--output_path", "position"]
    for port, args in ((29623, text), (29625, pos)):
        proc = launch_two(tmp_path, port, "lm_eval", *args, *common)
        assert proc.returncode == 0, proc.stderr[-4000:]
    (log,) = (tmp_path / "position").rglob("samples_*.jsonl")
    assert [json.loads(x)["doc_id"] for x in log.read_text().splitlines()] == [0, 2, 4, 1, 3]
    out = tmp_path / "ingested"
    assert (
        cli(["ingest", str(tmp_path / "text"), str(tmp_path / "position"), "--out", str(out)]) == 0
    )

    def same_cells(df: pd.DataFrame) -> pd.DataFrame:
        if "kind" in df.columns:
            df = df[df["kind"] != "feature"].copy()
        if "realised_n" in df.columns:  # lm-eval's output records no model rows
            realised = [c for c in df.columns if c.startswith("realised_")]
            df.loc[df["kind"] == "position", realised] = np.nan
        return df[~df["model"].str.endswith("+random-init")]

    # results.parquet differs in how the model is described (lm-eval records no local
    # fingerprint); its values are compared through perdoc and degradation
    assert_tables_equal(one_process, out, keep=same_cells, names=INGESTED_TABLES)
