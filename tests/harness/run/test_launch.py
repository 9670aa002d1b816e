"""``posgen run`` under a data-parallel launch: 2 CPU processes (``accelerate launch``,
gloo) give the per-document values, scores and files of one process."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from posgen.harness.run.launch import Launch
from synthetic_run import cli

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


def test_one_process_is_rank_0_of_1_and_needs_no_collectives(monkeypatch):
    monkeypatch.delenv("WORLD_SIZE", raising=False)
    launch = Launch.detect()
    assert (launch.rank, launch.world_size, launch.is_main) == (0, 1, True)
    assert launch.accelerator is None and launch.share({"a": 1}) == {"a": 1}
    launch.finish()


def launch_two(cwd: Path, model: Path, out: Path, port: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "ACCELERATE_USE_CPU": "true", "OMP_NUM_THREADS": "1"}
    src = str(Path(__file__).parents[3] / "src")  # this checkout's posgen first
    env["PYTHONPATH"] = os.pathsep.join(p for p in (src, env.get("PYTHONPATH")) if p)
    cmd = [str(BIN / "accelerate"), "launch", "--multi_gpu", "--num_processes", "2"]
    cmd += ["--num_machines", "1", "--main_process_port", str(port), "-m", "posgen"]
    cmd += ["run", "--model", str(model), *ARGS, "--out", str(out)]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


def files(run: Path) -> set[str]:
    return {str(p.relative_to(run)) for p in run.rglob("*") if p.is_file()}


@pytest.mark.slow
def test_two_cpu_processes_equal_one(tiny_model_dir, tmp_path):
    model = tiny_model_dir("llama", 0)
    one, two = tmp_path / "one", tmp_path / "launch"
    assert cli(["run", "--model", str(model), *ARGS, "--out", str(one)]) == 0
    two.mkdir()
    proc = launch_two(two, model, two / "run", port=29613)
    assert proc.returncode == 0, proc.stderr[-4000:]
    assert proc.stdout.count("posgen run: report in") == 1  # rank 0 alone reports
    assert os.listdir(two) == ["run"]  # nothing written outside the run folder
    assert files(two / "run") == files(one)
    for name, keys in TABLES.items():
        a = pd.read_parquet(one / name).sort_values(keys).reset_index(drop=True)
        b = pd.read_parquet(two / "run" / name).sort_values(keys).reset_index(drop=True)
        assert len(a) == len(b) > 0
        pd.testing.assert_frame_equal(b, a, check_exact=False, rtol=1e-6, atol=1e-9)
    perdoc = pd.read_parquet(two / "run" / "perdoc.parquet")
    assert set(perdoc["kind"]) == {"text", "position", "feature"}
    assert not np.allclose(perdoc["delta"], 0)
    # the documents were sharded: rank 0's log shows its 3 of 5 requests per cell, and
    # no rank wrote its 2 there
    for log in (two / "run" / "raw").glob("*/lm_eval.log"):
        text = log.read_text()
        assert "Running loglikelihood requests:   0%|          | 0/3" in text
        assert "0/5 " not in text and "0/2 " not in text
