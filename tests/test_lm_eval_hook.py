"""The start-up hook activates only for the lm-eval command line, and lazily."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from posgen._lm_eval_hook import _is_lm_eval_cli


@pytest.mark.parametrize(
    ("argv0", "orig", "expected"),
    [
        ("/venv/bin/lm_eval", ["/venv/bin/python", "/venv/bin/lm_eval", "--tasks", "x"], True),
        ("/venv/bin/lm-eval", ["/venv/bin/python", "/venv/bin/lm-eval"], True),
        ("-m", ["/venv/bin/python", "-m", "lm_eval", "--help"], True),
        ("-m", ["/venv/bin/python", "-m", "lm_eval.__main__"], True),
        ("-m", ["/venv/bin/python", "-m", "pytest", "lm_eval"], False),
        ("-c", ["/venv/bin/python", "-c", "import lm_eval"], False),
        ("/venv/bin/posgen", ["/venv/bin/python", "/venv/bin/posgen", "run"], False),
        ("/venv/bin/accelerate", ["python", "/venv/bin/accelerate", "launch"], False),
    ],
)
def test_hook_detects_only_the_lm_eval_cli(argv0, orig, expected):
    assert _is_lm_eval_cli(argv0, orig) is expected


def _python(code: str, *args: str, **env: str) -> subprocess.CompletedProcess:
    full_env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", **env}
    return subprocess.run(
        [sys.executable, *args, *(["-c", code] if code else [])],
        env=full_env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _imported(stderr: str) -> set[str]:
    """Module names from ``-X importtime`` output."""
    return {
        ln.rsplit("|", 1)[1].strip() for ln in stderr.splitlines() if ln.startswith("import time:")
    }


def test_lm_eval_help_imports_no_torch_through_posgen() -> None:
    proc = _python("", "-X", "importtime", "-m", "lm_eval", "--help")
    assert proc.returncode == 0, proc.stderr[-2000:]
    imported = _imported(proc.stderr)
    assert "posgen._lm_eval_hook" in imported  # the hook ran
    assert "torch" not in imported and "posgen.harness.hf_posgen.model" not in imported


def test_the_hook_registers_lazily_then_resolves() -> None:
    code = """
import sys
from posgen import _lm_eval_hook as hook
hook.activate()
from lm_eval.api.registry import model_registry
print("torch" in sys.modules, "hf-posgen" in model_registry)
import lm_eval.tasks, lm_eval.tasks.manager, lm_eval.evaluator
names = {m.TaskManager.__name__ for m in (lm_eval.tasks, lm_eval.tasks.manager, lm_eval.evaluator)}
print(sorted(names), "torch" in sys.modules)
tm = lm_eval.tasks.TaskManager()
print("perm_swap_5pct" in tm.all_groups, "perm_swap_5pct_posgen_prose" in tm.all_subtasks)
print(model_registry.get("hf-posgen").__name__)
"""
    proc = _python(code, POSGEN_DISABLE_LM_EVAL_HOOK="1")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.split("\n")[:4] == [
        "False True",  # registered by name, nothing heavy imported
        "['PosgenTaskManager'] False",  # lm-eval's task manager replaced on import
        "True True",  # the shipped family is found without writing into lm_eval/tasks
        "HFPosgenLM",
    ]


REFUSE = """
from posgen._lm_eval_hook import refuse_bad_model_args_in_one_line
refuse_bad_model_args_in_one_line()
from posgen.harness.model_side.perturbation import ModelPerturbation
ModelPerturbation.parse("swap:0.1", None, 0, {layers!r}, {heads!r})
"""


@pytest.mark.parametrize(
    ("layers", "heads", "message"),
    [
        ("a", None, "layers=a: 'a' is not a layer (12)"),
        (None, "99", "heads=99 picks query heads within layers=; give layers= too"),
    ],
)
def test_bad_model_args_end_in_one_line_and_exit_2(layers, heads, message) -> None:
    proc = _python(REFUSE.format(layers=layers, heads=heads))
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"lm_eval: hf-posgen: {message}"), line


def test_a_compat_error_ends_in_one_line_and_exits_2() -> None:
    code = (
        "from posgen._lm_eval_hook import refuse_bad_model_args_in_one_line as r\nr()\n"
        "from posgen import compat\ncompat.internal('transformers.no_such_module:x')\n"
    )
    proc = _python(code)
    assert proc.returncode == 2, proc.stderr[-2000:]
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith("lm_eval: hf-posgen: transformers.no_such_module:x is missing"), line


def test_other_errors_keep_their_traceback() -> None:
    code = "from posgen._lm_eval_hook import refuse_bad_model_args_in_one_line as r\nr()\n1/0\n"
    proc = _python(code)
    assert proc.returncode == 1 and "Traceback" in proc.stderr
    assert "ZeroDivisionError" in proc.stderr


def _lm_eval_cli(model_args: str, task: str = "posgen_prose") -> subprocess.CompletedProcess:
    """The real console script on ``task`` (one document), hf-posgen with ``model_args``."""
    import shutil

    script = shutil.which("lm_eval", path=os.path.dirname(sys.executable))
    assert script, "the lm_eval console script is not installed next to this Python"
    cmd = [script, "--model", "hf-posgen", "--model_args", model_args, "--tasks", task]
    env = {k: v for k, v in os.environ.items() if k != "POSGEN_DISABLE_LM_EVAL_HOOK"}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    return subprocess.run(
        [*cmd, "--limit", "1", "--device", "cpu"],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _one_line_refusal(proc: subprocess.CompletedProcess) -> list[str]:
    assert proc.returncode == 2, proc.stderr[-3000:]
    assert "Traceback" not in proc.stderr, proc.stderr[-3000:]
    return [ln for ln in proc.stderr.splitlines() if ln.startswith("lm_eval: ")]


def test_the_lm_eval_cli_refuses_a_layer_past_the_last_in_one_line(tiny_model_dir) -> None:
    """The real console script: ``layers=99`` of a 2-layer model, refused from its config
    before the weights load, one line under lm-eval's own log lines, exit status 2."""
    model = tiny_model_dir("llama", 0)
    proc = _lm_eval_cli(f"pretrained={model},positions=swap:0.1,layers=99")
    assert _one_line_refusal(proc) == [f"lm_eval: hf-posgen: layers=99: {model} has 2 layers (0-1)"]


def test_the_lm_eval_cli_refuses_an_empty_logits_in_one_line(tiny_model_dir) -> None:
    """``logits=`` (empty) ran the plain model and exited 0: now one line, exit status 2,
    before the weights load."""
    proc = _lm_eval_cli(f"pretrained={tiny_model_dir('llama', 0)},logits=")
    assert _one_line_refusal(proc) == [
        "lm_eval: hf-posgen: logits= is empty: give a form (additive, distance, key, "
        "shuffled), or leave logits= out"
    ]


def test_the_lm_eval_cli_refuses_length_on_learned_positions_before_the_weights_load(
    tiny_model_dir,
) -> None:
    """``length=`` on GPT-2 (a learned table, no row past C) was refused only after the
    weights had loaded: now from its config, one line, exit status 2, no weights loaded."""
    proc = _lm_eval_cli(f"pretrained={tiny_model_dir('gpt2', 0)},length=lambda:4:8")
    assert _one_line_refusal(proc) == [
        "lm_eval: hf-posgen: length=lambda:4,8: this 'gpt2' model has learned absolute "
        "positions: its table has a row per position up to its trained context C and none "
        "past it, so it cannot run past C; drop length="
    ]
    assert "Loading weights" not in proc.stderr, proc.stderr[-3000:]


def test_the_lm_eval_cli_refuses_a_generative_task_under_infllm_in_one_line(tiny_model_dir):
    """posgen_recall (the offline suite's generative task) under ``length=infllm`` ended in
    a NotImplementedError traceback: now one line naming the schemes generation runs
    under, exit status 2, before any generation request runs."""
    proc = _lm_eval_cli(f"pretrained={tiny_model_dir('llama', 0)},length=infllm", "posgen_recall")
    (line,) = _one_line_refusal(proc)
    assert line.startswith("lm_eval: hf-posgen: generate_until under length=infllm:"), line
    assert "generation runs under length=none, dynamic:FACTOR, scale:FACTOR, yarn:FACTOR" in line
