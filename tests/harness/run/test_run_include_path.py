"""``posgen run --include-path DIR`` on a generative task of the user's own (text and
position cells), with lm-eval's generation and prompt options; report, baseline and check
read the run back without the flags (integration tier, tiny models)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from synthetic_run import cli

pytestmark = pytest.mark.heavy

TASK = "mine_name_the_animal"
YAML = f"""task: {TASK}
dataset_path: json
dataset_kwargs:
  data_files:
    test: DATA
test_split: test
output_type: generate_until
doc_to_text: "Question: {{{{question}}}}\\nAnswer:"
doc_to_target: "{{{{answer}}}}"
generation_kwargs:
  until: ["\\n"]
  max_gen_toks: 6
  do_sample: false
metric_list:
  - metric: exact_match
    aggregation: mean
    higher_is_better: true
  - metric: chrf  # lm-eval passes [reference, prediction] through; the task aggregates
    aggregation: !function mine_utils.share_identical
    higher_is_better: true
metadata:
  version: 1
"""
UTILS = """def share_identical(items):
    return sum(1.0 for ref, pred in items if ref == pred) / len(items)
"""
DOCS = [
    {"question": f"The small {a} sat on the old mat this morning. Which animal sat?", "answer": a}
    for a in ("cat", "dog", "bird")
]
OPTIONS = ["--gen-kwargs", "max_gen_toks=3", "--system-instruction", "Answer in one word."]


def write_task(folder: Path) -> Path:
    folder.mkdir(parents=True)
    data = folder / "docs.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in DOCS), encoding="utf-8")
    (folder / f"{TASK}.yaml").write_text(YAML.replace("DATA", str(data)), encoding="utf-8")
    (folder / "mine_utils.py").write_text(UTILS, encoding="utf-8")
    return folder


def run(model: Path, out: Path, tasks: Path, *extra: str) -> int:
    argv = ["run", "--model", str(model), "--include-path", str(tasks), "--suite", TASK]
    argv += ["--limit", "2", "--kinds", "text,position", "--rates", "0,0.5", "--no-progress"]
    return cli([*argv, "--out", str(out), *extra])


@pytest.fixture(scope="module")
def own_run(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("include_path")
    tasks = write_task(root / "my tasks")
    out = root / "run"
    assert run(tiny_model_dir("llama", 0), out, tasks, *OPTIONS) == 0
    return out, tasks


def test_the_run_records_its_task_folder_and_options(own_run):
    out, tasks = own_run
    config = json.loads((out / "config.json").read_text())["config"]
    assert config["include_path"] == [str(tasks.resolve())]
    assert config["gen_kwargs"] == {"max_gen_toks": 3}
    assert config["system_instruction"] == "Answer in one word."
    assert "fewshot_as_multiturn" not in config  # not given: lm-eval's default, unrecorded


def test_lm_eval_got_the_generation_and_prompt_options(own_run):
    out, _ = own_run
    for cell, task in [
        (f"{TASK}__none", TASK),
        (f"{TASK}__text_swap_0.5", f"perm_swap_50pct_{TASK}"),
        (f"{TASK}__position_swap_0.5", TASK),  # generation under hf-posgen's positions
    ]:
        (results,) = [json.loads(p.read_text()) for p in out.glob(f"raw/*/{cell}/*/results_*.json")]
        gen = results["configs"][task]["generation_kwargs"]
        assert gen["max_gen_toks"] == 3 and gen["until"] == ["\n"]  # over the task's own
        assert results["system_instruction"] == "Answer in one word."
        (samples,) = out.glob(f"raw/*/{cell}/*/samples_*.jsonl")
        for line in samples.read_text().splitlines():
            prompt = json.loads(line)["arguments"]["gen_args_0"]["arg_0"]
            assert prompt.startswith("Answer in one word.")


def test_report_baseline_and_check_read_the_task_folder_from_the_config(own_run, tmp_path, capsys):
    out, _ = own_run
    assert cli(["report", str(out)]) == 0
    assert "not scored" not in capsys.readouterr().err
    scores = json.loads((out / "scores.json").read_text())
    rules = {s["metric"]: s["rule"] for s in scores["metrics"][TASK]}
    # the task's own aggregation function, loaded from the recorded folder
    assert rules == {"exact_match": "mean", "chrf": "corpus"}
    baseline = tmp_path / "baseline.json"
    assert cli(["baseline", str(out), "-o", str(baseline)]) == 0
    pairing = json.loads(baseline.read_text())["pairing"]
    assert pairing["gen_kwargs"] == {"max_gen_toks": 3}
    assert pairing["system_instruction"] == "Answer in one word."
    capsys.readouterr()
    assert cli(["check", str(out), "--baseline", str(baseline)]) == 0
    table = capsys.readouterr().out
    assert f"{TASK}/exact_match/text/swap@0.5" in table
    assert f"{TASK}/exact_match/position/swap@0.5" in table


def test_check_refuses_a_run_with_other_prompt_options(own_run, tiny_model_dir, tmp_path, capsys):
    out, tasks = own_run
    baseline = tmp_path / "baseline.json"
    assert cli(["baseline", str(out), "-o", str(baseline)]) == 0
    other = tmp_path / "other"
    assert run(tiny_model_dir("llama", 0), other, tasks, "--gen-kwargs", "max_gen_toks=4") == 0
    capsys.readouterr()
    assert cli(["check", str(other), "--baseline", str(baseline)]) == 2
    err = capsys.readouterr().err
    assert "gen_kwargs differs (baseline {'max_gen_toks': 3}, run {'max_gen_toks': 4})" in err
    assert "system_instruction differs (baseline 'Answer in one word.', run None)" in err
