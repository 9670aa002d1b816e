"""hf-posgen end to end: the real ``lm_eval`` console script, and ``simple_evaluate``."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import lm_eval
import pytest
from lm_eval.tasks import TaskManager

from posgen.lm_eval_plugin import register_all
from tiny_models import training_text

pytestmark = pytest.mark.heavy

TASK = "posgen_hf_posgen_check"


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory) -> Path:
    """A tiny local perplexity task (JSON docs + YAML), found with --include_path."""
    root = tmp_path_factory.mktemp("task")
    docs = root / "docs.jsonl"
    docs.write_text("".join(json.dumps({"text": t[:300]}) + "\n" for t in training_text()[:5]))
    (root / f"{TASK}.yaml").write_text(
        f"task: {TASK}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {docs}\ntest_split: test\noutput_type: loglikelihood_rolling\n"
        'doc_to_text: ""\ndoc_to_target: "{{text}}"\nmetric_list:\n'
        "  - metric: word_perplexity\n  - metric: bits_per_byte\n"
    )
    return root


_MANAGERS: dict[Path, TaskManager] = {}


def evaluate(model: str, model_args: str, task_dir: Path, **kwargs) -> dict:
    """simple_evaluate on the tiny task; one TaskManager per folder (indexing is slow)."""
    register_all()
    if task_dir not in _MANAGERS:
        _MANAGERS[task_dir] = TaskManager(include_path=str(task_dir))
    out = lm_eval.simple_evaluate(
        model=model,
        model_args=model_args,
        tasks=[TASK],
        device="cpu",
        batch_size=2,
        task_manager=_MANAGERS[task_dir],
        **kwargs,
    )
    return out


def ppl(results: dict) -> float:
    return results["results"][TASK]["word_perplexity,none"]


def test_lm_eval_console_script_runs_hf_posgen(tiny_model_dir, task_dir, tmp_path):
    script = shutil.which("lm_eval", path=os.path.dirname(sys.executable))
    assert script, "the lm_eval console script is not installed next to this Python"
    env = {k: v for k, v in os.environ.items() if k != "POSGEN_DISABLE_LM_EVAL_HOOK"}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    model_args = f"pretrained={tiny_model_dir('llama')},positions=swap:0.05,perturb_seed=3"
    cmd = [
        script,
        "--model",
        "hf-posgen",
        "--model_args",
        model_args,
        "--device",
        "cpu",
        "--tasks",
        TASK,
        "--include_path",
        str(task_dir),
        "--output_path",
        str(tmp_path),
    ]
    proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (result_file,) = tmp_path.glob("*/results_*.json")
    results = json.loads(result_file.read_text())
    assert results["config"]["model"] == "hf-posgen"
    assert results["config"]["posgen"]["positions_str"] == "swap:0.05"
    assert results["config"]["posgen"]["perturb_seed"] == 3
    assert ppl(results) > 1


def test_simple_evaluate_identity_equals_hf_and_swap_differs(tiny_model_dir, task_dir):
    path = tiny_model_dir("llama")
    plain = ppl(evaluate("hf", f"pretrained={path}", task_dir))
    assert ppl(evaluate("hf-posgen", f"pretrained={path},positions=shift:0", task_dir)) == plain
    swapped = evaluate("hf-posgen", f"pretrained={path},positions=swap:0.5", task_dir)
    assert ppl(swapped) != plain
    assert swapped["config"]["posgen"]["positions"]["params"] == {"rate": 0.5}


def test_use_cache_keys_include_the_model_side_spec(tiny_model_dir, task_dir, tmp_path):
    path = tiny_model_dir("llama")
    cache = str(tmp_path / "responses")
    swapped = ppl(
        evaluate("hf-posgen", f"pretrained={path},positions=swap:0.5", task_dir, use_cache=cache)
    )
    unperturbed = ppl(evaluate("hf-posgen", f"pretrained={path}", task_dir, use_cache=cache))
    plain = ppl(evaluate("hf", f"pretrained={path}", task_dir))
    assert unperturbed == plain != swapped
    again = ppl(
        evaluate("hf-posgen", f"pretrained={path},positions=swap:0.5", task_dir, use_cache=cache)
    )
    assert again == swapped
