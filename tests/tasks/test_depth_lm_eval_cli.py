"""The real ``lm_eval`` command runs the evidence-depth tasks (built-in, and the worked YAML
of docs/depth.md) through posgen's start-up hook, with each moved document's nominal and
realised depth in its per-sample output, and refuses bad depth input in one line before
the model loads (integration tier)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_depth_protocol import GOOD, docs_yaml, without_protocol, write_task
from test_lm_eval_cli import run_cli

from posgen.tasks import depth_suite

pytestmark = pytest.mark.heavy

LAYOUT = ("posgen_evidence_char_start", "posgen_evidence_to_question_chars", "posgen_prompt_chars")


def samples(out: Path, task: str) -> list[dict]:
    """lm-eval's per-sample rows of ``task`` (not of a task whose name it begins)."""
    (path,) = (
        p for p in out.rglob("samples_*.jsonl") if re.fullmatch(rf"samples_{task}_\d.*", p.name)
    )
    return [json.loads(line) for line in path.read_text().splitlines()]


def run_tiny(model: Path, tasks: list[str], out: Path, cwd: Path, *extra: str):
    return run_cli(
        "--model",
        "hf",
        "--model_args",
        f"pretrained={model},dtype=float32",
        "--device",
        "cpu",
        "--tasks",
        ",".join(tasks),
        "--limit",
        "2",
        "--batch_size",
        "4",
        "--log_samples",
        "--output_path",
        str(out),
        *extra,
        cwd=cwd,
    )


def check_realised_depth(row: dict, context: str, depth: float) -> None:
    """A sample's doc records the nominal depth and where the evidence really sits: its
    passage index, and in the prompt the model read its character offset, the characters
    between it and the question, and the prompt's length."""
    doc = row["doc"]
    k, t = doc["posgen_k"], doc["posgen_evidence"]
    assert doc["posgen_depth_nominal"] == depth and t == round(depth * (k - 1))
    assert doc["posgen_evidence_depth"] == t / (k - 1)
    start, between, total = (doc[f] for f in LAYOUT)
    evidence = doc["posgen_passages"][t]
    assert total == len(context) and context[start : start + len(evidence)] == evidence
    assert context[start + len(evidence) + between :].startswith(doc["posgen_question"])


def test_plain_lm_eval_runs_every_built_in_task_at_depth_50pct(tiny_model_dir, tmp_path) -> None:
    out = tmp_path / "out"
    tasks = [f"perm_depth_50pct_{t}" for t in depth_suite.TASKS]
    proc = run_tiny(tiny_model_dir("llama", 0), tasks, out, tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(next(out.rglob("results_*.json")).read_text())
    for task in tasks:
        base = task.removeprefix("perm_depth_50pct_")
        originals = {d["doc_id"]: d for d in depth_suite.documents(base)}
        rows = samples(out, task)
        assert len(rows) == 2 and results["results"][task]
        for s in rows:
            doc, orig = s["doc"], originals[s["doc"]["posgen_doc_id"]]
            context = s["arguments"]["gen_args_0"]["arg_0"]
            check_realised_depth(s, context, 0.5)
            assert doc["posgen_depth_source"] == orig["evidence"]
            assert doc["passages"][doc["evidence"]] == orig["passages"][orig["evidence"]]
            assert sorted(doc["passages"]) == sorted(orig["passages"])
        meta = results["configs"][task]["metadata"]["posgen"]
        assert meta["base_task"] == base and meta["spec"]["params"] == {"depth": 0.5}


def test_the_docs_worked_yaml_runs_through_lm_eval_s_include_path(tiny_model_dir, tmp_path) -> None:
    """The YAML block of docs/depth.md, written as it is, run with ``--include_path`` on a
    tiny model: as it is, and with the evidence moved first."""
    folder, out = tmp_path / "mine", tmp_path / "out"
    folder.mkdir()
    write_task(folder, "my_depth_qa", [GOOD, {**GOOD, "gold_index": 2}])
    assert (folder / "my_depth_qa.yaml").read_text(encoding="utf-8") == docs_yaml()
    tasks = ["my_depth_qa", "perm_depth_0pct_my_depth_qa"]
    proc = run_tiny(tiny_model_dir("llama", 0), tasks, out, folder, "--include_path", str(folder))
    assert proc.returncode == 0, proc.stderr[-3000:]
    results = json.loads(next(out.rglob("results_*.json")).read_text())["results"]
    for task in tasks:
        assert "exact_match,none" in results[task]
    for s in samples(out, "perm_depth_0pct_my_depth_qa"):
        context = s["arguments"]["gen_args_0"]["arg_0"]
        check_realised_depth(s, context, 0.0)
        first = s["doc"]["docs"][0]  # the evidence, moved first
        assert first == GOOD["docs"][s["doc"]["posgen_depth_source"]]
        assert context.startswith(f"Answer the question from the documents.\n\n{first}\n\n")
    as_is = {s["doc"]["posgen_doc_id"]: s["doc"] for s in samples(out, "my_depth_qa")}
    assert [as_is[i]["posgen_evidence"] for i in sorted(as_is)] == [1, 2]
    assert all("posgen_depth_nominal" not in d for d in as_is.values())


@pytest.fixture(scope="module")
def user_tasks(tmp_path_factory) -> Path:
    """Tasks of one's own that cannot take a depth move."""
    folder = tmp_path_factory.mktemp("bad-depth-tasks")
    write_task(folder, "my_plain_qa", [GOOD], without_protocol(docs_yaml()))
    write_task(folder, "my_one_passage", [GOOD, {**GOOD, "docs": ["only one"], "gold_index": 0}])
    wrong = docs_yaml().replace("passages: docs", "passages: documents")
    write_task(folder, "my_wrong_field", [GOOD], wrong)
    return folder


@pytest.mark.parametrize(
    ("task", "message"),
    [
        ("perm_depth_150pct_posgen_kv", "depth must be a number in [0, 1]"),
        ("perm_depth_m25pct_posgen_kv", "'m25pct' is not a depth level; write the depth in"),
        (
            "perm_depth_50pct_my_plain_qa",
            "task 'my_plain_qa' does not say which of its doc fields are the passages, the "
            "evidence and the question; add to its YAML: metadata: {posgen_depth: {passages: "
            "FIELD, evidence: FIELD, question: FIELD}}",
        ),
        (
            "perm_depth_50pct_my_wrong_field",
            "doc test:0: no field 'documents' (metadata.posgen_depth.passages)",
        ),
        ("my_one_passage", "doc test:1: 1 passage in field 'docs'; evidence depth needs at least"),
    ],
)
def test_bad_depth_input_is_one_line_and_exit_2_before_the_model_loads(
    tmp_path, user_tasks, task, message
) -> None:
    """The model path does not exist: had lm_eval loaded it, it would fail otherwise."""
    proc = run_cli(
        "--model",
        "hf",
        "--model_args",
        f"pretrained={tmp_path / 'no-such-model'}",
        "--include_path",
        str(user_tasks),
        "--tasks",
        task,
        cwd=tmp_path,
    )
    assert proc.returncode == 2, proc.stderr[-3000:]
    last = proc.stderr.strip().splitlines()[-1]
    assert last.startswith("lm_eval: posgen task: ") and message in last
    assert "Traceback" not in proc.stderr
