"""Generation (generate_until) under model-side perturbations, on tiny models (seconds).

The planted model (``tiny_models.build_previous_token_model``) attends one position
back in every head, so its next token depends on positions: moving them must change
its generations, and moving nothing (or moving every position alike) must not.
"""

from __future__ import annotations

import random

import pytest
import torch
from lm_eval.models.huggingface import HFLM

from generation_requests import PROMPTS, generate, greedy_rows, requests, rotary_inputs
from posgen.harness.hf_posgen.generation import generating, plan_generation
from posgen.harness.hf_posgen.model import HFPosgenLM
from tiny_models import ROPE_ARCHS, save_previous_token_model

pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def planted(tmp_path_factory) -> str:
    return str(save_previous_token_model(tmp_path_factory.mktemp("planted")))


@pytest.fixture(scope="module")
def lm(planted):
    return HFPosgenLM(pretrained=planted, device="cpu", batch_size=4)


@pytest.fixture(scope="module")
def hf(planted):
    return HFLM(pretrained=planted, device="cpu", batch_size=4)


@pytest.fixture(scope="module")
def plain(hf) -> list[str]:
    return generate(hf)


@pytest.fixture
def perturbed(lm):
    """``perturbed(positions, features, layers, heads)`` sets ``lm``'s spec (seed 5)."""
    yield lambda *spec: lm.set_perturbation(*spec[:2], 5, *spec[2:])
    lm.set_perturbation()


# ---------------------------------------------------------------- lm-eval's own call
def test_lm_eval_passes_the_mask_so_rows_count_their_own_tokens(planted, monkeypatch):
    """The decision's ground: HFLM.generate_until hands generate() the attention mask,
    so with pad == EOS each row's real tokens are at 0..n−1 in the prefill, and at
    n, n+1, ... per step; plain batched generation equals generation one by one."""
    hf = HFLM(pretrained=planted, device="cpu", batch_size=4)
    hf.tokenizer.pad_token = hf.tokenizer.eos_token  # as SmolLM2 and many chat models
    one_by_one = generate(hf, batch_size=1)
    given = []
    original = hf.model.generate
    monkeypatch.setattr(hf.model, "generate", lambda **kw: given.append(kw) or original(**kw))
    seen = rotary_inputs(hf.model, monkeypatch)
    assert generate(hf, batch_size=4) == one_by_one
    (kwargs,) = given
    mask = kwargs["attention_mask"]
    lengths = mask.sum(dim=1).tolist()
    assert kwargs["pad_token_id"] == hf.tokenizer.eos_token_id and len(set(lengths)) == 4
    width = mask.shape[1]
    expected = [[0] * (width - n) + list(range(n)) for n in lengths]
    assert seen[0].tolist() == expected
    for k, step in enumerate(seen[1:]):
        assert step.tolist() == [[n + k] for n in lengths]


# ---------------------------------------------------------------- the planted model
def test_swap_changes_the_planted_generation_and_identity_does_not(lm, plain, perturbed):
    perturbed("swap:0", None)
    assert generate(lm) == plain
    perturbed("shift:7", None)  # every position alike: the generated tokens move with it
    assert generate(lm) == plain
    perturbed("swap:0.5", None)
    swapped = generate(lm)
    assert sum(a != b for a, b in zip(swapped, plain, strict=True)) >= 3
    perturbed(None, "rope_noise:2")
    assert generate(lm) != plain


@pytest.mark.parametrize(
    "spec",
    [
        ("swap:0.01", None, None, None),
        (None, "qk_noise:1e-30", None, None),
        ("swap:0.01", "qk_noise:1e-30", "0-1", "0;3"),
    ],
)
def test_hooks_that_move_nothing_give_plain_logits_bit_for_bit(lm, perturbed, spec):
    """The generation path with every hook on (positions planned and given per step,
    prompt keys kept and handed back, heads mixed) but nothing moved: a swap rate that
    draws no pair for these contexts, qk noise far below float32's resolution."""
    p = perturbed(*spec)
    context, mask = lm.tok_batch_encode(PROMPTS)
    plan = plan_generation(p, context, mask, context.shape[1] + 6)
    assert plan.table is None or torch.equal(plan.table, plan.natural)

    def run():
        out = lm.model.generate(
            input_ids=context,
            attention_mask=mask,
            max_new_tokens=6,
            do_sample=False,
            pad_token_id=lm.tokenizer.pad_token_id,
            output_logits=True,
            return_dict_in_generate=True,
        )
        return out.sequences, torch.stack(out.logits)

    expected = run()
    with generating(lm.model, plan):
        got = run()
    assert torch.equal(got[0], expected[0]) and torch.equal(got[1], expected[1])


# ---------------------------------------------------------------- the semantics
SPECS = [
    ("swap:0.5", None, None, None),
    (None, "rope_noise:1", None, None),
    (None, "qk_noise:1", None, None),
    ("shift:7", None, None, None),
    ("scale:0.5", None, None, None),
    ("swap:0.5", "rope_noise:0.5", None, None),
    ("swap:0.5", None, "1", None),
    ("swap:0.5", "qk_noise:1", "1", "0;2"),
    (None, "qk_noise:1", "0", "1"),
]


@pytest.mark.parametrize("spec", SPECS)
def test_each_generated_token_is_greedy_under_the_loglikelihood_forward(lm, perturbed, spec):
    """A generation is the greedy decode of the log-likelihood semantics: the context
    perturbed as a log-likelihood request's (same draw), the continuation at natural
    positions, the context's keys perturbed at every step."""
    perturbed(*spec)
    contexts, generated = greedy_rows(lm)
    reqs = [(None, c, g) for c, g in zip(contexts, generated, strict=True)]
    scored = lm._loglikelihood_tokens(reqs, disable_tqdm=True)
    assert [greedy for _, greedy in scored] == [True] * len(reqs)


@pytest.mark.parametrize("arch", ROPE_ARCHS)
def test_every_family_generates_the_loglikelihood_greedy_decode(tiny_model_dir, arch):
    """Each RoPE family, sliding-window layers included (Gemma2/3 keep the last 8 keys
    per step, so the kept prompt keys are spliced into a window that has moved)."""
    lm = HFPosgenLM(pretrained=str(tiny_model_dir(arch)), device="cpu", batch_size=4)
    for spec in (("swap:0.5", "qk_noise:1"), ("shift:3", "rope_noise:1")):
        lm.set_perturbation(*spec, seed=5)
        contexts, generated = greedy_rows(lm, new_tokens=6)
        assert min(len(c) for c in contexts) > 8
        reqs = [(None, c, g) for c, g in zip(contexts, generated, strict=True)]
        assert all(greedy for _, greedy in lm._loglikelihood_tokens(reqs, disable_tqdm=True))


def test_a_length_scale_moves_the_generated_tokens_too(planted):
    lm = HFPosgenLM(pretrained=planted, device="cpu", batch_size=4, length="scale:2")
    contexts, generated = greedy_rows(lm)
    reqs = [(None, c, g) for c, g in zip(contexts, generated, strict=True)]
    assert all(greedy for _, greedy in lm._loglikelihood_tokens(reqs, disable_tqdm=True))


def test_context_positions_are_a_loglikelihood_requests(lm, perturbed, monkeypatch):
    """What the rotary embedding computes from, row by row: the prefill's real columns
    and one value per decode step equal the log-likelihood row of context + generation."""
    perturbed("swap:0.5", "rope_noise:0.5")
    contexts, generated = greedy_rows(lm)
    context, mask = lm.tok_batch_encode(PROMPTS)
    seen = rotary_inputs(lm.model, monkeypatch)
    lm._model_generate(context, context.shape[1] + 8, [], attention_mask=mask, do_sample=False)
    prefill, steps = seen[0], torch.cat(seen[1:], dim=1)
    in_generation = []
    for b, context in enumerate(contexts):
        in_generation.append(torch.cat([prefill[b, prefill.shape[1] - len(context) :], steps[b]]))
    for b, (context, tokens) in enumerate(zip(contexts, generated, strict=True)):
        seen.clear()
        lm.batch_size_per_gpu = 1
        lm._loglikelihood_tokens([(None, context, tokens)], disable_tqdm=True)
        (row,) = seen
        n = len(context) + len(tokens) - 1
        assert torch.equal(in_generation[b][:n], row[0, :n]), b
        natural = torch.arange(len(context), len(context) + len(tokens) - 1)
        assert torch.equal(in_generation[b][len(context) : n], natural.to(row.dtype))
    lm.batch_size_per_gpu = 4


@pytest.mark.parametrize(
    "spec",
    [
        ("swap:0.5", None, None, None),
        (None, "rope_noise:1", None, None),
        (None, "qk_noise:1", None, None),
        ("swap:0.5", "qk_noise:1", "1", "0;2"),
    ],
)
def test_batch_size_and_order_do_not_change_generations(lm, perturbed, spec):
    perturbed(*spec)
    one_by_one = generate(lm, batch_size=1)
    order = list(range(len(PROMPTS)))
    random.Random(3).shuffle(order)
    shuffled = generate(lm, batch_size=4, prompts=[PROMPTS[i] for i in order])
    assert [shuffled[order.index(i)] for i in range(len(PROMPTS))] == one_by_one


def test_the_noise_of_a_token_does_not_depend_on_step_boundaries(lm, perturbed):
    p = perturbed(None, "qk_noise:1")
    short, long = generate(lm, new_tokens=3), generate(lm, new_tokens=9)
    assert all(b.startswith(a) for a, b in zip(short, long, strict=True))
    p = perturbed("swap:0.5", "rope_noise:1")
    context, mask = lm.tok_batch_encode(PROMPTS)
    grown = plan_generation(p, context, mask, context.shape[1] + 1)
    steps = torch.tensor([[n + 11] for n in mask.sum(dim=1).tolist()])
    grown.follow(lm.model, steps)  # a step past the planned width grows the plan
    full = plan_generation(p, context, mask, context.shape[1] + 40)
    width = grown.table.shape[1]
    assert width >= context.shape[1] + 12
    assert torch.equal(grown.table, full.table[:, :width])


# ---------------------------------------------------------------- refusals
def test_what_generation_does_not_run_is_refused_clearly(planted, lm, perturbed):
    lam = HFPosgenLM(pretrained=planted, device="cpu", length="lambda:2:8")
    with pytest.raises(NotImplementedError, match="length=lambda:2,8"):
        lam.generate_until(requests(PROMPTS[:1]))
    p = perturbed("swap:0.5", None)
    context, _ = lm.tok_batch_encode(PROMPTS)
    with pytest.raises(RuntimeError, match="attention mask"):
        lm._model_generate(context, context.shape[1] + 2, [], do_sample=False)
    right = lm.tok_batch_encode(PROMPTS, padding_side="right")
    with pytest.raises(RuntimeError, match="not left-padded"):
        plan_generation(p, right[0], right[1], 40)
    with pytest.raises(NotImplementedError, match="prefill_chunk_size"):
        generate(lm, new_tokens=2, prefill_chunk_size=4)
    perturbed("swap:0.5", None, "1", "0")
    with pytest.raises(NotImplementedError, match="num_beams"):
        generate(lm, new_tokens=2, num_beams=2)
