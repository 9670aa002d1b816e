"""Generation under a perturbation through lm-eval's machinery: a chat template, the
response cache, torch's sampling stream, and simple_evaluate on a generate_until task."""

from __future__ import annotations

import json

import lm_eval
import numpy as np
import pytest
import torch
from lm_eval.api.instance import Instance
from lm_eval.api.model import CachingLM
from lm_eval.models.huggingface import HFLM
from lm_eval.tasks import TaskManager

from generation_requests import PROMPTS, generate, requests, rotary_inputs
from posgen.harness.hf_posgen.model import HFPosgenLM
from posgen.harness.model_side.positions.plan import build_plan
from posgen.harness.run.realised_rows import RowRecorder
from posgen.lm_eval_plugin import register_all
from posgen.perturbations import parse
from tiny_models import save_previous_token_model

TASK = "posgen_generation_check"


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> str:
    return str(save_previous_token_model(tmp_path_factory.mktemp("planted")))


def test_only_the_content_moves_under_a_chat_template(chat_model, monkeypatch):
    """The context of a chat-templated generation: the template's tokens at their own
    positions, the content's drawn as a log-likelihood request's content (whole context
    string: its trailing newline is the template's)."""
    lm = HFPosgenLM(pretrained=str(chat_model), device="cpu", batch_size=2, positions="swap:0.5")
    lm.set_perturbation("swap:0.5", None, seed=5)
    lm.chat_template(True)
    rendered = [lm.apply_chat_template([{"role": "user", "content": p}]) for p in PROMPTS[1:3]]
    assert all(r.endswith("\n") for r in rendered)
    seen = rotary_inputs(lm.model, monkeypatch)
    generate(lm, batch_size=2, prompts=rendered, new_tokens=3)
    prefill = seen[0]
    swap = parse("position", "swap:0.5")
    encoded = [lm.tok_batch_encode([r])[0][0] for r in rendered]
    longest = max(ids.numel() for ids in encoded)
    for r, ids in zip(rendered, encoded, strict=True):
        n = ids.numel()
        b = 0 if n == longest else 1  # HFLM batches the longest context first
        mask = lm._chat.token_mask(lm.tokenizer, r, ids.tolist(), whole=True)
        assert mask.any() and not mask.all()
        expected = build_plan(ids[None], [n], (swap,), 5, content=[mask]).positions[0]
        got = prefill[b, prefill.shape[1] - n :]
        assert torch.equal(got, expected)
        natural = torch.arange(n)
        assert torch.equal(got[~torch.from_numpy(mask)], natural[~torch.from_numpy(mask)])
        assert not torch.equal(got, natural)
        content = np.flatnonzero(mask)
        assert sorted(got[content].tolist()) == content.tolist()


def test_the_plan_observer_sees_each_context_as_a_loglikelihood_request(planted):
    """posgen run's realised amounts: a generation batch is observed as its contexts
    right-aligned, with their documents, as a log-likelihood batch of them would be."""
    contexts = [p.rstrip() for p in PROMPTS]
    lm = HFPosgenLM(pretrained=planted, device="cpu", batch_size=4, positions="swap:0.5")

    def observed(kind: str, args) -> dict:
        lm.plan_observer = recorder = RowRecorder()
        reqs = [Instance(kind, None, a, i, ("t", i, 1)) for i, a in enumerate(args)]
        getattr(lm, kind)(reqs, disable_tqdm=True)
        return {item["key"]: item for item in recorder.realised()["items"]}

    generated = observed(
        "generate_until", [(c, {"until": [], "max_gen_toks": 2}) for c in contexts]
    )
    scored = observed("loglikelihood", [(c, " x") for c in contexts])
    assert generated == scored and len(generated) == len(contexts)
    assert sorted(d for item in generated.values() for d in item["docs"]) == [
        ["t", i] for i in range(len(contexts))
    ]
    assert any(item["fraction_moved"] > 0 for item in generated.values())


def test_use_cache_keeps_generations_of_perturbations_apart(planted, tmp_path, monkeypatch):
    lm = HFPosgenLM(pretrained=planted, device="cpu", batch_size=4, positions="swap:0.5")
    cached = CachingLM(lm, str(tmp_path / "cache.db"))
    swapped = cached.generate_until(requests(PROMPTS))
    lm.set_perturbation()
    plain = cached.generate_until(requests(PROMPTS))
    assert plain == generate(HFLM(pretrained=planted, device="cpu", batch_size=4))
    assert plain != swapped
    lm.set_perturbation("swap:0.5", None, seed=1234)
    monkeypatch.setattr(HFLM, "_model_generate", lambda *a, **k: pytest.fail("cache missed"))
    assert cached.generate_until(requests(PROMPTS)) == swapped


def test_sampling_draws_from_torch_exactly_as_plain_generation(planted):
    """hf-posgen draws nothing from torch's generator: under a seed lm-eval sets, a
    sampled generation consumes the same stream as plain hf's and repeats exactly."""
    hf = HFLM(pretrained=planted, device="cpu", batch_size=4)
    lm = HFPosgenLM(pretrained=planted, device="cpu", batch_size=4, features="qk_noise:1")

    def sampled(model) -> tuple[list[str], torch.Tensor]:
        torch.manual_seed(11)
        out = generate(model, do_sample=True, temperature=1.0)
        return out, torch.get_rng_state()

    plain, plain_state = sampled(hf)
    first, state = sampled(lm)
    assert torch.equal(state, plain_state)
    assert sampled(lm)[0] == first and first != plain


@pytest.fixture(scope="module")
def task_dir(tmp_path_factory):
    """A tiny local generate_until task scored by exact match."""
    root = tmp_path_factory.mktemp("gentask")
    docs = root / "docs.jsonl"
    rows = [{"question": p, "answer": p.split()[-1]} for p in PROMPTS]
    docs.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / f"{TASK}.yaml").write_text(
        f"task: {TASK}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {docs}\ntest_split: test\noutput_type: generate_until\n"
        'doc_to_text: "{{question}}"\ndoc_to_target: "{{answer}}"\n'
        "generation_kwargs:\n  until: ['\\n']\n  max_gen_toks: 6\n  do_sample: false\n"
        "metric_list:\n  - metric: exact_match\n"
    )
    return root


def test_simple_evaluate_runs_a_generate_until_task_under_swap(planted, task_dir, monkeypatch):
    from posgen.harness.hf_posgen import model

    plans = []
    original = model.generating
    monkeypatch.setattr(
        model, "generating", lambda m, plan: plans.append(plan) or original(m, plan)
    )
    register_all()
    out = lm_eval.simple_evaluate(
        model="hf-posgen",
        model_args=f"pretrained={planted},positions=swap:0.2,perturb_seed=3",
        tasks=[TASK],
        device="cpu",
        batch_size=2,
        task_manager=TaskManager(include_path=str(task_dir)),
        log_samples=True,
    )
    assert out["config"]["model_args"].endswith("positions=swap:0.2,perturb_seed=3")
    assert 0 <= out["results"][TASK]["exact_match,none"] <= 1
    samples = out["samples"][TASK]
    assert len(samples) == len(PROMPTS) and all(isinstance(s["resps"][0][0], str) for s in samples)
    assert len(plans) == 2  # two batches of two, each generated under its plan
    assert any(not torch.equal(plan.table, plan.natural) for plan in plans)
