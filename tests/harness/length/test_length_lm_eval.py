"""hf-posgen's ``length=``: identity bit-equal to ``hf``, Λ and rope scalings run any
lm-eval task (a tiny perplexity task past a 64-token trained context)."""

from __future__ import annotations

import json
from pathlib import Path

import lm_eval
import pytest
from lm_eval.api.instance import Instance
from lm_eval.models.huggingface import HFLM
from lm_eval.tasks import TaskManager

from posgen.harness.hf_posgen.model import HFPosgenLM
from posgen.lm_eval_plugin import register_all
from posgen.perturbations import PerturbationError
from tiny_models import build_short_context_model, build_tokenizer, training_text

pytestmark = pytest.mark.heavy

TASK = "posgen_length_check"
TEXTS = [t[: 200 + 90 * i] for i, t in enumerate(training_text()[:6])]


def rolling(lm) -> list[float]:
    reqs = [Instance("loglikelihood_rolling", None, (t,), i) for i, t in enumerate(TEXTS)]
    return lm.loglikelihood_rolling(reqs, disable_tqdm=True)


@pytest.fixture(scope="module")
def short_model(tmp_path_factory) -> str:
    path = tmp_path_factory.mktemp("tiny-llama-64")
    build_short_context_model("llama", max_positions=64).save_pretrained(path)
    build_tokenizer().save_pretrained(path)
    return str(path)


def test_length_none_is_bit_identical_to_hf(tiny_model_dir):
    path = str(tiny_model_dir("llama"))
    expected = rolling(HFLM(pretrained=path, device="cpu", batch_size=4))
    lm = HFPosgenLM(pretrained=path, device="cpu", batch_size=4, length="none")
    assert rolling(lm) == expected
    assert lm.get_model_info()["posgen"]["length_str"] == "none"


def test_schemes_change_rolling_loglikelihood_past_the_context(short_model):
    kwargs = dict(pretrained=short_model, device="cpu", batch_size=2, max_length=256)
    plain = rolling(HFLM(**kwargs))
    for length in ("lambda:2:16", "scale:2", "yarn:2", "dynamic:2"):
        lm = HFPosgenLM(length=length, **kwargs)
        got = rolling(lm)
        assert max(abs(g - p) for g, p in zip(got, plain, strict=True)) > 1e-3, length
    assert lm.model.model.rotary_emb.rope_type == "dynamic"


@pytest.mark.parametrize(
    ("length", "match"),
    [("lambda:2", "GLOBAL,WINDOW"), ("yarn:0.5", ">= 1"), ("ntk:2", "Accepted")],
)
def test_bad_length_fails_before_the_weights_load(length, match):
    with pytest.raises(PerturbationError, match=match):
        HFPosgenLM(pretrained="/nonexistent/model", length=length)


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("length-task")
    docs = root / "docs.jsonl"
    docs.write_text("".join(json.dumps({"text": t}) + "\n" for t in TEXTS[:3]))
    body = (
        f"task: {TASK}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n    test: {docs}\n"
        "test_split: test\noutput_type: loglikelihood_rolling\ndoc_to_text: ''\n"
        "doc_to_target: '{{text}}'\nmetric_list:\n  - metric: word_perplexity\n"
    )
    (root / f"{TASK}.yaml").write_text(body)
    return root


def test_an_lm_eval_task_runs_under_lambda(short_model, task_dir):
    register_all()
    manager = TaskManager(include_path=str(task_dir))
    ppl = {}
    for name, args in (
        ("hf", f"pretrained={short_model},max_length=256"),
        ("hf-posgen", f"pretrained={short_model},max_length=256,length=lambda:2:16"),
    ):
        out = lm_eval.simple_evaluate(
            model=name,
            model_args=args,
            tasks=[TASK],
            device="cpu",
            batch_size=1,
            task_manager=manager,
        )
        ppl[name] = out["results"][TASK]["word_perplexity,none"]
    assert ppl["hf-posgen"] != pytest.approx(ppl["hf"], rel=1e-6)
    assert out["config"]["model_args"].endswith("length=lambda:2:16")


@pytest.mark.parametrize("length", ["infllm", "lambda:2:16"])
def test_generation_under_an_attention_scheme_is_refused_in_one_line(tiny_model_dir, length):
    """``lm_eval ... length=infllm --tasks posgen_recall`` (a generative task) ended in a
    NotImplementedError traceback: now a refusal in one line (a PerturbationError, which
    the lm_eval command prints alone with exit status 2) as generate_until starts, naming
    the schemes generation runs under."""
    from posgen.harness.hf_posgen.generation import GenerationRefused

    lm = HFPosgenLM(pretrained=str(tiny_model_dir("llama")), device="cpu", length=length)
    gen = Instance("generate_until", None, ("hello", {"max_gen_toks": 4}), 0)
    with pytest.raises(PerturbationError) as refused:
        lm.generate_until([gen], disable_tqdm=True)
    message = str(refused.value)
    assert isinstance(refused.value, GenerationRefused) and "\n" not in message
    assert f"generate_until under length={length.split(':')[0]}" in message
    assert "runs under length=none, dynamic:FACTOR, scale:FACTOR, yarn:FACTOR" in message
    assert "run this scheme on loglikelihood tasks" in message
