"""hf-posgen ``positions=depth:D`` on tiny models: the evidence block's ids moved with
the tokens in place, bit-equal to ``hf`` at the evidence's own depth on every position
family, a planted reader that recovers the evidence only where its ids sit, the realised
depth recorded per row, and the refusals."""

from __future__ import annotations

import pytest
import torch
from lm_eval.models.huggingface import HFLM

import depth_requests as dr
from posgen.harness.hf_posgen.depth_rows import context_blocks
from posgen.harness.hf_posgen.model import HFPosgenLM
from posgen.harness.run.realised_rows import RowRecorder
from posgen.perturbations import parse
from posgen.perturbations.base import PerturbationError
from tiny_models import build_tokenizer

# rotary (Llama), learned absolute (GPT-2, OPT), ALiBi (BLOOM, MPT, Falcon-ALiBi)
FAMILIES = ("llama", "gpt2", "opt", "bloom", "mpt", "falcon_alibi")
OWN = 2  # the evidence's own index among 5 passages: depth 0.5


def scores(lm, requests) -> list[float]:
    return [ll for ll, _ in lm.loglikelihood(requests, disable_tqdm=True)]


@pytest.mark.parametrize("arch", FAMILIES)
def test_the_evidences_own_depth_is_plain_hf_and_another_moves_it(tiny_model_dir, arch):
    """At depth 0.5 (slot 2 of 5, where the evidence is) log-likelihoods and generations
    are bit-equal to lm-eval's hf and to hf-posgen without positions, in padded batches;
    at depth 1 (the evidence's ids moved past two passages) every log-likelihood moves."""
    path = str(tiny_model_dir(arch))
    plain = HFLM(pretrained=path, device="cpu", batch_size=4)
    reqs, gens = dr.loglikelihood(OWN), dr.generation(OWN)
    expected, generated = scores(plain, reqs), plain.generate_until(gens, disable_tqdm=True)
    lm = HFPosgenLM(pretrained=path, device="cpu", batch_size=4)
    assert scores(lm, reqs) == expected
    lm.set_perturbation("depth:0.5")
    assert lm.perturbation.changes_model
    assert scores(lm, reqs) == expected
    assert lm.generate_until(gens, disable_tqdm=True) == generated
    lm.set_perturbation("depth:1")
    moved = scores(lm, reqs)
    assert all(m != e for m, e in zip(moved, expected, strict=True))
    assert len(lm.generate_until(gens, disable_tqdm=True)) == len(gens)


def planted_lm(tmp_path, at: int) -> HFPosgenLM:
    folder = tmp_path / f"reader-{at}"
    dr.position_reader(at).save_pretrained(folder)
    build_tokenizer().save_pretrained(folder)
    return HFPosgenLM(pretrained=str(folder), device="cpu", batch_size=1)


def test_a_planted_reader_recovers_the_evidence_only_where_its_ids_sit(tmp_path):
    """A model whose next token is the token at position id P (dr.position_reader): P is
    where the evidence's first token sits at depth 1 (the evidence first in the text).
    Generation reads the evidence's first token at depth 1 only; at the other depths (and
    in the text, depth 0) the token given id P is another."""
    passages, evidence = dr.PASSAGES[0], 0
    text = dr.context(passages)
    tokenizer = build_tokenizer()
    ids = tokenizer(text)["input_ids"]
    blocks = context_blocks(tokenizer, text, ids, dr.doc(passages, evidence))
    first = ids[blocks.bounds[evidence]]
    depth = parse("position", "depth:1")
    at = depth.layout(blocks.bounds, evidence, len(ids)).evidence_start
    # the evidence's block laid out last, before the question
    assert at == blocks.bounds[-1] - (blocks.bounds[1] - blocks.bounds[0])
    assert ids[at] != first
    lm = planted_lm(tmp_path, at)
    assert lm.tok_encode(text) == ids
    request = dr.generation(evidence, sets=(passages,), new_tokens=1)
    read = {}
    for d in ("0", "0.25", "0.5", "0.75", "1"):
        lm.set_perturbation(f"depth:{d}")
        (read[d],) = lm.generate_until(request, disable_tqdm=True)
    assert read["1"] == tokenizer.decode([first])
    assert all(read[d] != read["1"] for d in ("0", "0.25", "0.5", "0.75"))


def test_each_row_records_its_realised_depth_beside_the_nominal_one(tiny_model_dir):
    """The plan observer's rows (posgen run's realised amounts) carry the depth each row's
    ids realise: the evidence's first id, its distance to the question, the context's
    tokens and the slot, for log-likelihood and generation alike."""
    lm = HFPosgenLM(pretrained=str(tiny_model_dir("llama")), device="cpu", batch_size=4)
    lm.set_perturbation("depth:0")
    depth = parse("position", "depth:0")
    expected = set()
    for p in dr.PASSAGES:
        text = dr.context(p)
        blocks = context_blocks(lm.tokenizer, text, lm.tok_encode(text), dr.doc(p, OWN))
        realised = depth.realised(blocks, len(lm.tok_encode(text)))
        expected.add(tuple(sorted(realised.items())))
    for kind, reqs in (("loglikelihood", dr.loglikelihood(OWN)), ("gen", dr.generation(OWN))):
        lm.plan_observer = recorder = RowRecorder()
        getattr(lm, "generate_until" if kind == "gen" else kind)(reqs, disable_tqdm=True)
        items = recorder.realised()["items"]
        got = {tuple(sorted((k, v) for k, v in i.items() if k.startswith("depth_"))) for i in items}
        assert got == expected, kind
    item = dict(next(iter(expected)))
    assert item["depth_nominal"] == 0.0 and item["depth_target"] == 0
    assert item["depth_source"] == OWN and item["depth_k"] == 5
    assert item["depth_evidence_offset"] < item["depth_n"]
    assert item["depth_to_question"] > 0


def test_depth_outside_0_1_is_refused_before_weights_load(tmp_path):
    with pytest.raises(PerturbationError, match=r"depth must be a number in \[0, 1\]"):
        HFPosgenLM(pretrained=str(tmp_path / "absent"), positions="depth:1.5")


def test_depth_beside_a_length_scheme_that_scales_positions_is_refused_before_load(tmp_path):
    with pytest.raises(PerturbationError, match=r"positions=depth:0\.5 beside length=scale:2"):
        HFPosgenLM(pretrained=str(tmp_path / "absent"), positions="depth:0.5", length="scale:2")


@pytest.mark.parametrize("kind", ["loglikelihood", "generate_until"])
def test_a_request_without_the_field_protocol_is_refused_in_one_line(tiny_model_dir, kind):
    """A task that is not an evidence-depth task: its documents carry no passages."""
    lm = HFPosgenLM(pretrained=str(tiny_model_dir("llama")), device="cpu", positions="depth:1")
    reqs = dr.loglikelihood(OWN) if kind == "loglikelihood" else dr.generation(OWN)
    reqs[1].doc = {"text": "no passages"}
    with pytest.raises(PerturbationError) as refused:
        getattr(lm, kind)(reqs, disable_tqdm=True)
    message = str(refused.value)
    assert "\n" not in message
    assert "document 1 of task 't' has no posgen_passages" in message
    assert "metadata.posgen_depth" in message and "docs/depth.md" in message


def test_rolling_windows_are_refused(tiny_model_dir):
    from lm_eval.api.instance import Instance

    lm = HFPosgenLM(pretrained=str(tiny_model_dir("llama")), device="cpu", positions="depth:1")
    reqs = [Instance("loglikelihood_rolling", {"text": "x"}, ("some text",), 0, ("t", 0, 1))]
    with pytest.raises(PerturbationError, match="perplexity windows are not"):
        lm.loglikelihood_rolling(reqs, disable_tqdm=True)


def test_a_context_cut_into_its_passages_is_refused(tiny_model_dir):
    """HFLM cuts a context longer than max_length from the left: when the cut reaches
    the passages, the evidence's depth would be another document's."""
    path = str(tiny_model_dir("llama"))
    lm = HFPosgenLM(pretrained=path, device="cpu", positions="depth:1", max_length=12)
    with pytest.raises(PerturbationError, match="drops tokens of its passages"):
        lm.loglikelihood(dr.loglikelihood(OWN), disable_tqdm=True)


def test_passages_not_in_the_rendered_context_are_refused(tiny_model_dir):
    lm = HFPosgenLM(pretrained=str(tiny_model_dir("llama")), device="cpu", positions="depth:1")
    reqs = dr.loglikelihood(OWN)
    reqs[0].doc["posgen_passages"] = ["not rendered", *reqs[0].doc["posgen_passages"][1:]]
    with pytest.raises(PerturbationError, match="render the passages field as it is"):
        lm.loglikelihood(reqs, disable_tqdm=True)


def test_the_continuation_keeps_its_positions_after_the_context(tiny_model_dir, plans):
    """A log-likelihood row: the context's ids moved (a permutation of its own), the
    continuation at n, n + 1, ... as for every scheme that moves a context."""
    lm = HFPosgenLM(pretrained=str(tiny_model_dir("llama")), device="cpu", positions="depth:0")
    lm.loglikelihood(dr.loglikelihood(OWN), disable_tqdm=True)
    assert len(plans) == len(dr.PASSAGES)  # batch size 1
    for _, plan in plans:
        (n,), (span,) = plan.lengths, plan.spans
        row = plan.positions[0, :n]
        assert span < n
        assert sorted(row[:span].tolist()) == list(range(span))
        assert not torch.equal(row[:span], torch.arange(span))
        assert torch.equal(row[span:], torch.arange(span, n))
