"""The door: the one context that puts a model-side perturbation on a model, usable
outside hf-posgen's _model_call with a plan of its own, and the one every forward of
every command and of hf-posgen under lm-eval passes through."""

from __future__ import annotations

import pytest
import torch

from posgen.harness.hf_posgen.batch_rows import NO_DOCS, PaddedRows
from posgen.harness.hf_posgen.model import HFPosgenLM
from posgen.harness.model_side import door

pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def lm(tiny_model_dir):
    return HFPosgenLM(pretrained=str(tiny_model_dir("llama")), device="cpu", batch_size=2)


@pytest.mark.parametrize(
    ("positions", "features", "layers"),
    [("swap:0.3", None, None), (None, "qk_noise:0.5", None), ("shift:5", "rope_noise:0.3", "1")],
)
def test_the_context_outside_model_call_gives_model_calls_logits(lm, positions, features, layers):
    inps = torch.randint(3, 300, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        plain = lm.model(inps).logits
    p = lm.set_perturbation(positions, features, seed=5, layers=layers)
    try:
        with torch.no_grad():
            through_model_call = lm._model_call(inps)  # unpadded: every token is perturbed
            rows = PaddedRows([24, 24], [24, 24], [NO_DOCS, NO_DOCS], [None, None])
            with door.forward(lm.model, p, door.plan_forward(inps, p, rows)):
                inside = lm.model(inps).logits
            after = lm.model(inps).logits
    finally:
        lm.set_perturbation()
    assert torch.equal(inside, through_model_call)
    assert not torch.equal(inside, plain)
    assert torch.equal(after, plain)  # every hook and attention function taken off


# Every model-side forward of every command passes through the door: a global forward
# pre-hook sees every call of every Hugging Face model (the top module and its
# ``base_model``), however it was loaded (posgen's loader, lm-eval's own ``hf`` loading,
# a random-init twin), and records whether the door was entered around it.


@pytest.fixture
def watched():
    """``{"inside": count, "outside": [model class, ...]}`` of every model forward run
    while the fixture is active."""
    from transformers import PreTrainedModel

    seen: dict = {"inside": 0, "outside": []}

    def hook(module: torch.nn.Module, args: tuple) -> None:
        if isinstance(module, PreTrainedModel):
            if door.inside():
                seen["inside"] += 1
            else:
                seen["outside"].append(type(module).__name__)

    handle = torch.nn.modules.module.register_module_forward_pre_hook(hook)
    yield seen
    handle.remove()


@pytest.fixture(scope="module")
def short_model(tmp_path_factory) -> str:
    """A tiny Llama with a trained context C = 64 (``posgen length``, ``--length``)."""
    from tiny_models import save_short_context

    return str(save_short_context(tmp_path_factory.mktemp("short"), "llama", 64))


INFLLM = "infllm:n_init=2:n_local=16:block_size=4:topk=2:repr_topk=2"


def _commands(tiny: str, short: str, out) -> dict[str, list[str]]:
    """Each command on a tiny model, in settings that reach every path it runs the model
    through (its cells, the random-init twin, the decomposition, the length schemes)."""
    quick = ["--limit", "2", "--no-progress"]
    return {
        "run": ["run", "--model", short, "--suite", "posgen_prose", "--rates", "0,0.5",
                "--kinds", "position", "--random-init", "--limit", "1", "--no-progress",
                "--out", str(out / "run")],  # --length: the length runner, as below
        "length": ["length", "--model", short, "--schemes",
                   f"none;lambda:2,32;scale:2;yarn:2;{INFLLM}", "--positions", "swap:0.1",
                   "--documents", "1", "--bucket-width", "16", "--decompose",
                   "--out", str(out / "length")],
        "decompose": ["decompose", "--model", tiny, "--random-init", "--docs", "1",
                      "--tokens", "256", "--experiments", "--out", str(out / "decompose")],
        "decompose --length": ["decompose", "--model", short, "--docs", "1", "--tokens", "96",
                               "--length", "lambda:2,32", "--trained-context", "64",
                               "--out", str(out / "decompose-length")],
        "layers": ["layers", "--model", tiny, "--positions", "shuffle", "--decompose-docs",
                   "1", "--decompose-tokens", "32", "--out", str(out / "layers"), *quick],
        "cause": ["cause", "--model", tiny, "--forms", "additive", "--out",
                  str(out / "cause"), *quick],
    }  # fmt: skip


COMMANDS = ["run", "length", "decompose", "decompose --length", "layers", "cause"]


@pytest.mark.parametrize("command", COMMANDS)
def test_every_forward_of_every_command_passes_through_the_door(
    command, tiny_model_dir, short_model, tmp_path, watched
):
    from synthetic_run import cli

    argv = _commands(str(tiny_model_dir("llama")), short_model, tmp_path)[command]
    assert cli(argv) == 0
    assert watched["inside"] > 0, f"posgen {command} ran no forward"
    assert not watched["outside"], f"posgen {command}: forwards outside the door"


@pytest.mark.parametrize("args", ["", ",positions=swap:0.2,features=qk_noise:0.5"])
def test_every_forward_of_lm_eval_with_hf_posgen_passes_through_the_door(
    args, tiny_model_dir, watched
):
    """lm-eval's simple_evaluate with hf-posgen: loglikelihood (posgen_cloze), rolling
    (posgen_prose) and generation (posgen_recall), plain and perturbed."""
    import lm_eval

    from posgen.lm_eval_plugin import register_all
    from posgen.tasks.lm_eval_tasks import shared_task_manager

    register_all()
    tasks = ["posgen_cloze", "posgen_prose", "posgen_recall"]
    out = lm_eval.simple_evaluate(
        model="hf-posgen",
        model_args=f"pretrained={tiny_model_dir('llama')}{args}",
        tasks=tasks,
        device="cpu",
        batch_size=2,
        limit=2,
        task_manager=shared_task_manager(),
    )
    assert set(out["results"]) >= set(tasks)
    assert watched["inside"] > 0
    assert not watched["outside"], "hf-posgen: forwards outside the door"


def test_the_watch_sees_a_forward_outside_the_door(lm, watched):
    inps = torch.randint(3, 300, (1, 8), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        lm.model(inps)
        with door.forward(lm.model):
            lm.model(inps)
    assert watched["outside"] == ["LlamaForCausalLM", "LlamaModel"]
    assert watched["inside"] == 2 and not door.inside()
