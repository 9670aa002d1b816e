"""The real ``lm_eval`` command runs an evidence-depth task through posgen's start-up hook,
and refuses bad depth input in one line before the model loads (integration tier)."""

from __future__ import annotations

import pytest
from test_lm_eval_cli import run_cli, samples

from posgen.tasks import depth_suite


def test_plain_lm_eval_runs_perm_depth_50pct_posgen_kv(tiny_model_dir, tmp_path) -> None:
    model = tiny_model_dir("llama", 0)
    out = tmp_path / "out"
    task = "perm_depth_50pct_posgen_kv"
    proc = run_cli(
        "--model",
        "hf",
        "--model_args",
        f"pretrained={model},dtype=float32",
        "--device",
        "cpu",
        "--tasks",
        task,
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
    originals = {d["doc_id"]: d for d in depth_suite.documents("posgen_kv")}
    rows = samples(out, task)
    assert len(rows) == 3
    for s in rows:
        doc, orig = s["doc"], originals[s["doc"]["posgen_doc_id"]]
        context, target = s["arguments"]["gen_args_0"].values()
        lines = context.split("\n\n")[0].split("\n")
        gold = orig["passages"][orig["evidence"]]
        assert lines.index(gold) == 16 == doc["posgen_evidence"]  # t = 0.5 · 32
        assert sorted(lines) == sorted(orig["passages"]) and target == " " + orig["target"]
        assert doc["posgen_depth_nominal"] == 0.5 and doc["posgen_evidence_depth"] == 0.5


@pytest.mark.parametrize(
    ("task", "message"),
    [
        ("perm_depth_150pct_posgen_kv", "depth must be a number in [0, 1]"),
        ("perm_depth_50pct_posgen_cloze", "add to its YAML: metadata: {posgen_depth:"),
    ],
)
def test_bad_depth_input_is_one_line_and_exit_2_before_the_model_loads(
    tmp_path, task, message
) -> None:
    """The model path does not exist: had lm_eval loaded it, it would fail otherwise."""
    proc = run_cli(
        "--model",
        "hf",
        "--model_args",
        f"pretrained={tmp_path / 'no-such-model'}",
        "--tasks",
        task,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("lm_eval: posgen task: ") and message in last
    assert "Traceback" not in proc.stderr
