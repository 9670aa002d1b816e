"""Under a chat template hf-posgen perturbs the content of a context, never the template's
own tokens: they keep their positions, and their queries and keys."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posgen.harness.hf_posgen.chat_content import ChatContentError, ChatContents, content_spans
from posgen.harness.hf_posgen.model import HFPosgenLM
from posgen.harness.run.realised_rows import RowRecorder
from posgen.perturbations import parse

MARKERS = ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>")


# ---------------------------------------------------------------- locating content
def test_content_spans_are_found_in_message_order():
    messages = [
        {"role": "user", "content": "a b"},
        {"role": "assistant", "content": "a"},
        {"role": "user", "content": "b"},
    ]
    rendered = "<u>a b</u><a>a</a><u>b</u>"
    spans = content_spans(rendered, messages)
    assert [rendered[a:b] for a, b in spans] == ["a b", "a", "b"]
    assert spans[1][0] > spans[0][1] and spans[2][0] > spans[1][1]  # not the earlier "a"/"b"


def test_a_trimmed_content_and_a_dropped_system_turn_are_allowed():
    messages = [{"role": "system", "content": "be brief"}, {"role": "user", "content": " x y \n"}]
    rendered = "<u>x y</u>"
    assert content_spans(rendered, messages) == [(3, 6)]


def test_a_template_that_rewrites_content_is_refused():
    with pytest.raises(ChatContentError, match="verbatim"):
        content_spans("<u>HELLO</u>", [{"role": "user", "content": "hello"}])


# ---------------------------------------------------------------- with a model
def chat_requests(lm, posgen_tm, local_data, fewshot: int = 1) -> list:
    """lm-eval's HellaSwag requests rendered through ``lm``'s chat template, few-shot
    examples as turns (as lm-eval's CLI builds them)."""
    name = "hellaswag"
    task = posgen_tm.load([posgen_tm.task_config(name, local_data[name])])["tasks"][name]
    task.set_config(key="num_fewshot", value=fewshot)
    task.set_fewshot_seed(seed=1234)
    lm.chat_template(True)
    task.build_all_requests(
        rank=0,
        world_size=1,
        apply_chat_template=True,
        fewshot_as_multiturn=True,
        chat_template=lm.apply_chat_template,
    )
    return list(task.instances)[:8]


def template_tokens(tok, context: str, n: int) -> np.ndarray:
    """Tokens of the first n of ``context`` that cover a character of a template marker
    (found by the test from the markers' text, not by hf-posgen's mask)."""
    text = context.rstrip()
    marked = np.zeros(len(text) + 1, dtype=bool)
    for marker in MARKERS:
        at = text.find(marker)
        while at >= 0:
            marked[at : at + len(marker)] = True
            at = text.find(marker, at + 1)
    offsets = tok(text, add_special_tokens=False, return_offsets_mapping=True)["offset_mapping"]
    lead = n - len(offsets)
    out = np.zeros(n, dtype=bool)
    out[:lead] = True
    for t, (a, b) in enumerate(offsets):
        out[lead + t] = marked[a:b].any()
    return out


def test_only_the_content_moves_under_a_chat_template(chat_model, posgen_tm, local_data, plans):
    lm = HFPosgenLM(pretrained=str(chat_model), device="cpu", batch_size=4, positions="shuffle")
    requests = chat_requests(lm, posgen_tm, local_data)
    assert all(r.args[0].startswith("<|user|>\n") for r in requests)
    seen = plans
    recorder = RowRecorder()
    lm.plan_observer = recorder
    lm.loglikelihood(requests, disable_tqdm=True)
    contexts = {tuple(lm.tok_encode(r.args[0].rstrip())): r.args[0] for r in requests}
    checked = moved = 0
    for inps, plan in seen:
        assert plan.slots  # the content tokens of each row
        for b, (n, span) in enumerate(zip(plan.lengths, plan.spans, strict=True)):
            tokens = tuple(inps[b, :span].tolist())
            context = contexts[tokens]
            pos = plan.positions[b, :n].numpy()
            slots = plan.perturbed(b)
            fixed = np.setdiff1d(np.arange(n), slots)
            assert np.array_equal(pos[fixed], fixed)  # template and continuation stay
            assert np.array_equal(np.sort(pos[slots]), slots)  # content trades content slots
            marked = template_tokens(lm.tokenizer, context, span)
            assert marked.any() and not marked[slots].any()
            assert slots.size > 0.5 * span  # the content is most of a HellaSwag prompt
            moved += int((pos[slots] != slots).sum())
            checked += 1
    assert checked >= len(requests) // 4 and moved > 0
    items = recorder.realised()["items"]
    assert items and all(it["n"] > 0 for it in items)
    counted = {p.perturbed(b).size for _, p in seen for b in range(len(p.spans))}
    assert {it["n"] for it in items} <= counted  # content tokens only


def test_rope_noise_leaves_template_positions_exact(chat_model, posgen_tm, local_data, plans):
    lm = HFPosgenLM(
        pretrained=str(chat_model), device="cpu", batch_size=4, features="rope_noise:0.5"
    )
    requests = chat_requests(lm, posgen_tm, local_data, fewshot=0)
    seen = plans
    lm.loglikelihood(requests, disable_tqdm=True)
    for _, plan in seen:
        for b, n in enumerate(plan.lengths):
            pos = plan.positions[b, :n].numpy().astype(np.float64)
            slots = plan.perturbed(b)
            fixed = np.setdiff1d(np.arange(n), slots)
            assert np.array_equal(pos[fixed], fixed)
            assert np.all(pos[slots] != slots)


def test_qk_noise_touches_the_content_tokens_only():
    scheme = parse("feature", "qk_noise:0.5")
    x = torch.randn(2, 3, 7, 8)
    slots = (np.array([1, 2, 4]), None)
    y = scheme.perturb_qk(x, "query", 0, [5, 6], [b"a", b"b"], 1, slots)
    changed = (y != x).any(dim=-1).any(dim=1)  # [B, T]
    assert changed[0].tolist() == [False, True, True, False, True, False, False]
    assert changed[1].tolist() == [True] * 6 + [False]
    plain = scheme.perturb_qk(x, "query", 0, [5, 6], [b"a", b"b"], 1)
    assert torch.equal(y[1], plain[1])


def test_a_frame_scheme_under_a_chat_template_is_refused(chat_model, posgen_tm, local_data):
    lm = HFPosgenLM(pretrained=str(chat_model), device="cpu", batch_size=4, positions="shift:3")
    requests = chat_requests(lm, posgen_tm, local_data, fewshot=0)
    with pytest.raises(ValueError, match="shift:3 moves the whole frame"):
        lm.loglikelihood(requests, disable_tqdm=True)


def test_a_context_rendered_elsewhere_is_refused(chat_model, posgen_tm, local_data):
    lm = HFPosgenLM(pretrained=str(chat_model), device="cpu", batch_size=4, positions="swap:0.5")
    requests = chat_requests(lm, posgen_tm, local_data, fewshot=0)
    fresh = HFPosgenLM(pretrained=str(chat_model), device="cpu", batch_size=4, positions="swap:0.5")
    fresh.chat_template(True)  # as lm-eval asks, with requests from its request cache
    with pytest.raises(ChatContentError, match="request cache"):
        fresh.loglikelihood(requests, disable_tqdm=True)


def test_token_mask_needs_the_tokens_hflm_encoded(chat_model):
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(chat_model)
    chat = ChatContents()
    messages = [{"role": "user", "content": "The cat sat on the mat."}]
    rendered = tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    chat.record(rendered, messages)
    ids = tok(rendered.rstrip(), add_special_tokens=False)["input_ids"]
    mask = chat.token_mask(tok, rendered, ids)
    content = tok.decode([t for t, m in zip(ids, mask, strict=True) if m])
    assert content.strip() and content in "The cat sat on the mat."
    assert "<|" not in content
    with pytest.raises(ChatContentError, match="differ"):
        chat.token_mask(tok, rendered, [*ids[:-1], ids[-1] + 1])


def test_a_template_that_rewrites_content_fails_only_a_perturbed_cell(
    chat_model, posgen_tm, local_data
):
    from tiny_models import CHAT_TEMPLATE

    lm = HFPosgenLM(pretrained=str(chat_model), device="cpu", batch_size=4)
    lm.tokenizer.chat_template = CHAT_TEMPLATE.replace("m['content']", "m['content'] | upper")
    requests = chat_requests(lm, posgen_tm, local_data, fewshot=0)
    assert requests[0].args[0].split("\n")[1].split("<|")[0].isupper()
    assert len(lm.loglikelihood(requests, disable_tqdm=True)) == len(requests)  # unperturbed
    lm.set_perturbation("swap:0.5")
    with pytest.raises(ChatContentError, match="verbatim"):
        lm.loglikelihood(requests, disable_tqdm=True)


def test_a_row_without_content_tokens_keeps_every_position():
    from posgen.harness.model_side.positions.plan import build_plan

    ids = torch.arange(1, 13).reshape(2, 6)
    content = [np.zeros(4, dtype=bool), np.array([False, True, True, True])]
    plan = build_plan(ids, [6, 6], [parse("position", "shuffle")], 3, [4, 4], content)
    assert torch.equal(plan.positions[0], torch.arange(6))
    assert torch.equal(plan.positions[1, [0, 4, 5]], torch.tensor([0, 4, 5]))
    assert sorted(plan.positions[1, 1:4].tolist()) == [1, 2, 3]
