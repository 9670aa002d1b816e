"""The real ``lm_eval`` console script runs the shipped family (integration tier)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from posgen.tasks import offline

pytestmark = pytest.mark.heavy

BIN = Path(sys.executable).parent


def run_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1"}
    return subprocess.run(
        [str(BIN / "lm_eval"), *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def samples(out: Path, task: str) -> list[dict]:
    (path,) = out.rglob(f"samples_{task}_*.jsonl")
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_lm_eval_cli_runs_perm_swap_5pct(tiny_model_dir, tmp_path) -> None:
    model = tiny_model_dir("llama", 0)
    out = tmp_path / "out"
    dynamic = "perm_adjacent_7p5pct_seed3_posgen_cloze"  # not shipped: resolved by name
    proc = run_cli(
        "--model",
        "hf",
        "--model_args",
        f"pretrained={model},dtype=float32",
        "--device",
        "cpu",
        "--tasks",
        f"perm_swap_5pct,{dynamic}",
        "--limit",
        "3",
        "--batch_size",
        "4",
        "--log_samples",
        "--output_path",
        str(out),
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    cloze = {r["doc_id"]: r for r in offline.load_rows("posgen_cloze.jsonl")}
    prose = {r["doc_id"]: r for r in offline.load_rows("posgen_prose.jsonl")}
    for task in ("perm_swap_5pct_posgen_cloze", dynamic):
        rows = samples(out, task)
        assert len(rows) == 3
        for s in rows:
            orig = cloze[s["doc"]["posgen_doc_id"]]
            context, target = s["arguments"]["gen_args_0"].values()
            assert target == " " + orig["target"]  # the scored answer is untouched
            assert context == s["doc"]["context"] != orig["context"]  # the content moved
            assert Counter(context.split()) == Counter(orig["context"].split())
    for s in samples(out, "perm_swap_5pct_posgen_prose"):
        orig = prose[s["doc"]["posgen_doc_id"]]["text"]
        (text,) = s["arguments"]["gen_args_0"].values()
        assert text != orig and Counter(text.split()) == Counter(orig.split())
        assert re.split(r"\S+", text) == re.split(r"\S+", orig)  # whitespace layout kept
    (results,) = out.rglob("results_*.json")
    cfg = json.loads(results.read_text())["configs"]
    assert cfg["perm_swap_5pct_posgen_cloze"]["metadata"]["posgen"]["spec"]["params"] == {
        "rate": 0.05
    }
    assert cfg[dynamic]["metadata"]["posgen"]["seed"] == 3
