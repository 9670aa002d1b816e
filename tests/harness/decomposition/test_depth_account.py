"""The decomposition's account of the depth curve: the question's attention mass on the
evidence against the model's own attention weights, the fit's mass on an exactly
additive model (planted truth), the curve under logits=additive on it, and the
refusals."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from planted_models import planted_model
from posgen.harness.additive_fit.logit_fit import LayoutCache
from posgen.harness.decomposition.depth_account import (
    AccountSpec,
    RequestSpans,
    depth_account,
    depth_requests,
    layer_masses,
    request_masses,
    request_spans,
)
from posgen.harness.hf_posgen.model import HFPosgenLM
from posgen.harness.input_error import InputError
from posgen.harness.model_side.logits.capture import capture_forward
from posgen.results.scores.depth_account import MASS_FORMS
from tiny_models import build_tokenizer

TASK = "posgen_kv_n5"


def spec(docs: int = 3, task: str = TASK) -> AccountSpec:
    return AccountSpec((task,), {task: docs})


@pytest.fixture(scope="module")
def tiny_lm(tiny_model_dir):
    return HFPosgenLM(pretrained=str(tiny_model_dir("llama", 0)), device="cpu", batch_size=2)


@pytest.fixture(scope="module")
def planted_lm(tmp_path_factory):
    """The exactly additive one-layer GPT-NeoX (λ = 0) with the tiny tokenizer."""
    path = tmp_path_factory.mktemp("planted") / "model"
    planted_model(0.0).save_pretrained(path)
    build_tokenizer().save_pretrained(path)
    return HFPosgenLM(pretrained=str(path), device="cpu", batch_size=2)


def test_the_spans_are_the_evidence_passage_and_the_question(tiny_lm, posgen_tm):
    """The blocks come from the document's fields: the evidence block's tokens spell the
    evidence passage (and its separator), the question block's the question."""
    for request in depth_requests(tiny_lm, TASK, 0.5, spec(), posgen_tm):
        spans = request_spans(tiny_lm, request)
        doc = request.doc
        evidence = doc["posgen_passages"][doc["posgen_evidence"]]
        text = tiny_lm.tokenizer.decode(spans.ids[slice(*spans.evidence)])
        assert text.strip() == evidence
        question = tiny_lm.tokenizer.decode(spans.ids[slice(*spans.question)])
        assert question.strip() == doc["posgen_question"]


def test_the_measured_mass_is_the_models_own_attention_weights(tiny_lm, posgen_tm, tiny_model_dir):
    """Measured mass = Σ over the evidence columns of the eager model's attention weights
    (output_attentions), averaged over the question's rows, per layer and head."""
    eager = AutoModelForCausalLM.from_pretrained(
        tiny_model_dir("llama", 0), attn_implementation="eager"
    ).eval()
    request = depth_requests(tiny_lm, TASK, 0.5, spec(1), posgen_tm)[0]
    spans = request_spans(tiny_lm, request)
    rows = request_masses(tiny_lm, spans)
    with torch.no_grad():
        weights = eager(torch.tensor([spans.ids]), output_attentions=True).attentions
    (q0, q1), (e0, e1) = spans.question, spans.evidence
    for row in rows:
        a = weights[row["layer"]][0, row["head"]].double()
        expected = a[q0:q1, e0:e1].sum(-1).mean()
        assert row["measured"] == pytest.approx(float(expected), abs=1e-6)
    assert len(rows) == 2 * 4  # two layers of four heads


def _masses(model, ids, spans) -> dict[str, torch.Tensor]:
    kept = {}
    capture_forward(model, ids, lambda cap: kept.update(layer_masses(cap, spans, LayoutCache())))
    return kept


@pytest.mark.parametrize("interaction", [0.0, 0.7])
def test_the_fits_mass_is_the_measured_mass_when_the_logits_are_additive(interaction):
    """λ = 0: W is exactly a[i−j] + b[i] + c[j], so its fit's softmax is the model's; the
    planted interaction (λ = 0.7) makes them differ."""
    ids = [10, 11, 12, 13, 20, 30, 40, 50, 60, 70, 11, 12, 13, 10, 12, 14, 15, 16, 17, 18]
    spans = RequestSpans(ids, (15, 20), (4, 9))
    got = _masses(planted_model(interaction), ids, spans)
    gap = (got["additive"] - got["measured"]).abs().max().item()
    if interaction == 0.0:
        assert gap < 1e-5
    else:
        assert gap > 1e-3
    assert set(got) == set(MASS_FORMS)


def test_the_curve_under_logits_additive_is_plain_on_an_additive_model(planted_lm, posgen_tm):
    values, masses = depth_account(planted_lm, spec(3), posgen_tm, "planted", False)
    by_form = {f: sub.sort_values(["depth", "doc_key"]) for f, sub in values.groupby("form")}
    plain, additive = by_form["plain"]["ll"].to_numpy(), by_form["additive"]["ll"].to_numpy()
    assert plain.shape == (9,)  # 3 depths × 3 documents
    assert abs(plain - additive).max() < 1e-3
    assert abs(plain - by_form["key"]["ll"].to_numpy()).max() > 1e-3  # the forms do differ
    assert (masses["additive"] - masses["measured"]).abs().max() < 1e-5


@pytest.mark.parametrize(
    ("task", "message"),
    [
        ("posgen_prose", "does not say which of its doc fields are the passages"),
        ("posgen_kv_mc_n5", "takes a log-likelihood task with one request per document"),
    ],
)
def test_tasks_the_account_cannot_score_are_refused_in_one_line(tiny_lm, posgen_tm, task, message):
    with pytest.raises(InputError, match=message) as e:
        depth_requests(tiny_lm, task, 0.5, spec(2, task), posgen_tm)
    assert "\n" not in str(e.value)
