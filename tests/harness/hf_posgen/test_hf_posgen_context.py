"""hf-posgen perturbs the context of a loglikelihood request only, never the answer.

Every answer choice of a document sees one perturbed context (drawn from the context
tokens alone), the continuation keeps its positions in order after it, and rolling
perplexity still perturbs each whole window.
"""

from __future__ import annotations

from collections import defaultdict

import numpy as np
import pytest
import torch
from lm_eval.api.instance import Instance

from posgen.harness.hf_posgen.model import HFPosgenLM
from posgen.harness.model_side.attention import qk_noise
from posgen.harness.model_side.positions.plan import build_plan
from posgen.harness.model_side.positions.rotary import rotary_positions
from posgen.perturbations import parse
from tiny_models import training_text


@pytest.fixture(scope="module")
def llama(tiny_model_dir):
    return str(tiny_model_dir("llama"))


def planned_rows(seen):
    """Per real row: (tokens, span, position values or None, key)."""
    for inps, plan in seen:
        for b, (n, s, key) in enumerate(zip(plan.lengths, plan.spans, plan.keys, strict=True)):
            pos = None if plan.positions is None else plan.positions[b, :n]
            yield inps[b, :n].tolist(), s, pos, key


@pytest.mark.parametrize(
    ("positions", "features"),
    [("swap:0.5", None), (None, "rope_noise:0.5"), (None, "qk_noise:0.3")],
)
def test_choices_of_a_document_see_one_perturbed_context(
    llama, hellaswag_requests, plans, positions, features
):
    lm = HFPosgenLM(
        pretrained=llama, device="cpu", batch_size=3, positions=positions, features=features
    )
    seen = plans
    lm.loglikelihood(hellaswag_requests, disable_tqdm=True)
    contexts = {r.doc_id: lm.tok_encode(r.args[0]) for r in hellaswag_requests}
    by_doc = defaultdict(list)
    for tokens, span, pos, key in planned_rows(seen):
        doc = next(d for d, ctx in contexts.items() if tokens[:span] == ctx)
        by_doc[doc].append((tokens, span, pos, key))
        if pos is not None:  # the continuation keeps its positions, in order
            assert torch.equal(pos[span:], torch.arange(span, len(tokens)).to(pos.dtype))
    assert sorted(by_doc) == sorted(contexts)
    context_draws = []
    for rows in by_doc.values():
        assert len(rows) == 4  # four endings, one forward each
        assert len({key for *_, key in rows}) == 1  # one draw per document
        if rows[0][2] is not None:
            span = rows[0][1]
            heads = [pos[:span] for _, _, pos, _ in rows]
            assert all(torch.equal(h, heads[0]) for h in heads)
            assert not torch.equal(heads[0], torch.arange(span).to(heads[0].dtype))
            context_draws.append(heads[0])
    assert len(context_draws) in (0, len(contexts))


def plain_row_loglikelihood(lm, context, continuation, positions) -> float:
    """log p(continuation | context) from one forward with the given rotary positions."""
    ids = torch.tensor([context + continuation[:-1]])
    with torch.no_grad(), rotary_positions(lm.model, positions[None]):
        logp = torch.log_softmax(lm.model(ids).logits[0].double(), -1)
    rows = logp[len(context) - 1 :]
    return float(rows[torch.arange(len(continuation)), torch.tensor(continuation)].sum())


def test_a_choice_is_scored_under_its_context_perturbation_alone(llama):
    """Exactness against a hand-built forward: the context's positions are the scheme's
    draw from the context tokens, the continuation's are len(context) + 0..m-1."""
    text = training_text()[3]
    context_str = text[:300].rstrip()
    choices = [" " + text[400 + 37 * i : 430 + 53 * i] for i in range(4)]
    lm = HFPosgenLM(pretrained=llama, device="cpu", batch_size=4, positions="shuffle")
    scores = [
        ll
        for ll, _ in lm.loglikelihood(
            [Instance("loglikelihood", None, (context_str, c), i) for i, c in enumerate(choices)],
            disable_tqdm=True,
        )
    ]
    context = lm.tok_encode(context_str)
    drawn = torch.from_numpy(parse("position", "shuffle").position_values(context, seed=1234))
    for choice, score in zip(choices, scores, strict=True):
        continuation = lm.tok_encode(context_str + choice)[len(context) :]
        after = torch.arange(len(context), len(context) + len(continuation) - 1)
        expected = plain_row_loglikelihood(lm, context, continuation, torch.cat([drawn, after]))
        assert score == pytest.approx(expected, rel=1e-5, abs=1e-4)


def test_truncated_requests_perturb_the_context_that_remains(llama, plans):
    lm = HFPosgenLM(pretrained=llama, device="cpu", batch_size=4, positions="swap:0.5")
    lm._max_length = 40
    seen = plans
    context = list(range(3, 63))
    conts = [[70, 71], [80, 81, 82, 83, 84], [90]]
    reqs = [((f"c{i}", "x"), context, cont) for i, cont in enumerate(conts)]
    lm._loglikelihood_tokens(reqs, disable_tqdm=True)
    rows = sorted(planned_rows(seen), key=lambda row: row[1])
    assert [span for _, span, _, _ in rows] == [40 - 4, 40 - 1, 40]
    for (tokens, span, pos, _), cont in zip(rows, (conts[1], conts[0], conts[2]), strict=True):
        assert tokens[:span] == context[-span:] and tokens[span:] == cont[:-1]
        assert torch.equal(pos[span:], torch.arange(span, len(tokens)))


def test_requests_sharing_tokens_but_not_the_split_get_their_own_forward(llama):
    """HFLM answers requests with equal context + continuation[:-1] from one forward; under
    a context perturbation they must not share it when their contexts differ."""
    lm = HFPosgenLM(pretrained=llama, device="cpu", batch_size=4, features="rope_noise:2")
    context = list(range(3, 40))
    pair = [(("a", "b"), context, [50, 51]), (("c", "d"), [*context, 50], [52])]
    together = lm._loglikelihood_tokens(pair, disable_tqdm=True)
    alone = [lm._loglikelihood_tokens([r], disable_tqdm=True)[0] for r in pair]
    assert together == alone and lm.logits_cache


def test_rolling_perplexity_perturbs_each_whole_window(llama, plans):
    lm = HFPosgenLM(pretrained=llama, device="cpu", batch_size=4, positions="swap:0.5")
    seen = plans
    texts = [t[:300] for t in training_text()[:3]]
    lm.loglikelihood_rolling(
        [Instance("loglikelihood_rolling", None, (t,), i) for i, t in enumerate(texts)],
        disable_tqdm=True,
    )
    scheme = parse("position", "swap:0.5")
    rows = list(planned_rows(seen))
    assert len(rows) == 3
    for tokens, span, pos, _ in rows:
        assert span == len(tokens)
        assert np.array_equal(pos.numpy(), scheme.position_values(tokens, seed=1234))


def test_qk_noise_leaves_the_continuation_alone():
    """Rows sharing a context get the same noise on it and none on the continuation."""
    context = list(range(3, 20))
    ids = torch.tensor([[*context, 30, 31, 32], [*context, 40, 0, 0]])
    plan = build_plan(ids, [20, 18], [parse("feature", "qk_noise:0.5")], 7, spans=[17, 17])
    x = torch.ones(2, 2, 20, 8)
    delta = qk_noise.perturb(x, plan, layer=0, tensor="query") - x
    assert torch.equal(delta[0, :, :17], delta[1, :, :17]) and delta[0, :, :17].abs().min() > 0
    assert not delta[:, :, 17:].any()
