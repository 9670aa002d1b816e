"""The passage blocks of a request's context (``positions=depth:D``): character spans read
from the context's end, token bounds through the tokenizer's offsets, the plan's ids on
a real tokenizer (SmolLM2's) with a few-shot prefix, at batch sizes 1 and 4, and the
plan's per-row source."""

from __future__ import annotations

import shutil

import numpy as np
import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from posgen.harness.hf_posgen.depth_rows import char_bounds
from posgen.harness.hf_posgen.model import HFPosgenLM
from posgen.harness.model_side.positions.plan import build_plan
from posgen.perturbations import parse
from posgen.perturbations.base import PerturbationError
from posgen.perturbations.depth import PassageBlocks
from posgen.tasks.depth_protocol import passage_char_bounds, token_bounds
from tiny_models import CONFIGS

PASSAGES = ["a: one", "b: two", "c: three"]
OWN_TEXT = "Keys.\n" + "\n".join(PASSAGES) + "\n\nb:"


def test_char_bounds_take_the_documents_own_passages_after_a_few_shot_prefix():
    """The same passages in a few-shot example before the document: the blocks are the
    document's own (its question's last occurrence, each passage's last before it)."""
    shot = OWN_TEXT + " two\n\n"
    bounds = char_bounds(shot + OWN_TEXT, PASSAGES, "b:")
    own = [len(shot) + c for c in passage_char_bounds(OWN_TEXT, PASSAGES, "b:")]
    assert bounds == own
    assert (shot + OWN_TEXT)[bounds[1] : bounds[2]] == "b: two\n"
    assert (shot + OWN_TEXT)[bounds[-1] :] == "b:"


def test_char_bounds_without_the_question_end_at_the_last_passage():
    text = "\n".join(PASSAGES) + "\nQ"
    assert char_bounds(text, PASSAGES, "not there") == [0, 7, 14, 22]  # "c: three" ends at 22


def test_char_bounds_refuse_passages_out_of_order():
    with pytest.raises(ValueError, match="passage 0 of 3 is not in the rendered context"):
        char_bounds("b: two\na: one\nc: three\n\nb:", PASSAGES, "b:")


def test_the_plan_takes_each_rows_ids_from_its_blocks_and_refuses_a_row_without():
    """Row 0's context (its first 9 of 11 tokens) has blocks (2, 4, 6, 8) and its
    evidence first: at depth 1 it takes ids 6, 7; the others move up; the prefix, the
    rest and the continuation keep theirs. Row 1 (evidence at its slot) is arange."""
    ids = torch.arange(22).reshape(2, 11)
    depth = parse("position", "depth:1")
    blocks = [PassageBlocks((2, 4, 6, 8), 0), PassageBlocks((1, 3, 5, 7), 2)]
    plan = build_plan(ids, [11, 10], (depth,), 0, spans=[9, 8], blocks=blocks)
    assert plan.positions[0].tolist() == [0, 1, 6, 7, 2, 3, 4, 5, 8, 9, 10]
    assert plan.positions[1, :10].tolist() == list(range(10))
    assert plan.depth[0]["depth_evidence_offset"] == 6 and plan.depth[0]["depth_n"] == 9
    assert plan.depth[1]["depth_target"] == plan.depth[1]["depth_source"] == 2
    with pytest.raises(PerturbationError, match="needs each document's passage spans"):
        build_plan(ids, [11, 10], (depth,), 0, spans=[9, 8], blocks=[blocks[0], None])


@pytest.fixture(scope="module")
def smollm_tokenized(embedded_model_dir, tmp_path_factory) -> str:
    """A tiny random Llama with the embedded model's (SmolLM2's) tokenizer."""
    folder = tmp_path_factory.mktemp("smollm-tokenizer") / "model"
    tokenizer = AutoTokenizer.from_pretrained(embedded_model_dir)
    cfg = AutoConfig.for_model("llama", **dict(CONFIGS["llama"], vocab_size=len(tokenizer)))
    torch.manual_seed(0)
    AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).save_pretrained(folder)
    for name in ("tokenizer.json", "tokenizer_config.json"):
        shutil.copy(embedded_model_dir / name, folder / name)
    return str(folder)


def kv_requests(posgen_tm, limit: int = 4) -> list:
    """posgen_kv at 5 pairs, 2-shot: each context holds two other documents' pairs."""
    name = "posgen_kv_n5"
    task = posgen_tm.load([name])["tasks"][name]
    task.set_config(key="num_fewshot", value=2)
    task.set_fewshot_seed(seed=1234)
    task.build_all_requests(rank=0, world_size=1, limit=limit)
    return list(task.instances)


def expected_ids(tokenizer, request, depth) -> list[int]:
    """values_for_blocks on the token bounds of the document's own text (the context's
    end, found forward in it), followed by the continuation's own positions."""
    context = request.args[0]
    doc = request.doc
    own = "\n".join(doc["posgen_passages"]) + "\n\n" + doc["posgen_question"]
    assert context.endswith(own)
    prefix = len(context) - len(own)
    found = passage_char_bounds(own, doc["posgen_passages"], doc["posgen_question"])
    chars = [prefix + c for c in found]
    enc = tokenizer(context, add_special_tokens=False, return_offsets_mapping=True)
    bounds = token_bounds(chars, [s for s, _ in enc["offset_mapping"]])
    n = len(enc["input_ids"])
    return depth.values_for_blocks(bounds, doc["posgen_evidence"], n).tolist(), n


def test_a_rows_ids_are_values_for_blocks_on_a_real_tokenizer_with_few_shot(
    smollm_tokenized, posgen_tm, plans
):
    """Every row of posgen_kv (2-shot) gets values_for_blocks on its token bounds over
    its context, then its continuation's own positions; the same ids and scores at batch
    sizes 1 and 4 (padded)."""
    requests = kv_requests(posgen_tm)
    depth = parse("position", "depth:0")
    got: dict[int, list] = {}
    results = {}
    for batch in (1, 4):
        lm = HFPosgenLM(pretrained=smollm_tokenized, device="cpu", batch_size=batch)
        lm.set_perturbation("depth:0")
        plans.clear()
        results[batch] = [ll for ll, _ in lm.loglikelihood(requests, disable_tqdm=True)]
        rows = {}
        for inps, plan in plans:
            for b, n in enumerate(plan.lengths):
                rows[tuple(inps[b, : plan.spans[b]].tolist())] = plan.positions[b, :n].tolist()
        got[batch] = rows
    assert got[1] == got[4]
    assert any(p.positions.shape[0] > 1 for _, p in plans)  # batch 4: padded rows
    moved = 0
    for request in requests:
        values, n = expected_ids(lm.tokenizer, request, depth)
        context_ids = lm.tok_encode(request.args[0])
        assert len(context_ids) == n
        row = got[4][tuple(context_ids)]
        assert row[:n] == values
        assert row[n:] == list(range(n, len(row)))
        moved += values != list(range(n))
    assert moved >= 2
    assert np.allclose(results[1], results[4], atol=1e-4)
