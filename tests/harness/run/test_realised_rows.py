"""The realised position change of model-side cells, measured from the applied plan
(integration tier: a tiny random-weight Llama on CPU)."""

from __future__ import annotations

import math

import numpy as np
import pytest
from lm_eval.api.instance import Instance

from posgen.harness.hf_posgen.model import HFPosgenLM
from posgen.harness.run.realised_rows import RowRecorder, row_stats
from posgen.perturbations import parse
from posgen.results.tables.tidy import realised_record
from tiny_models import training_text

TEXTS = [t[: 40 + 30 * i] for i, t in enumerate(training_text()[:12])]


@pytest.fixture(scope="module")
def lm(tiny_model_dir):
    return HFPosgenLM(pretrained=str(tiny_model_dir("llama")), device="cpu", batch_size=4)


def _run(lm, positions=None, features=None) -> RowRecorder:
    lm.set_perturbation(positions=positions, features=features, seed=5)
    recorder = RowRecorder()
    lm.plan_observer = recorder
    try:
        reqs = [Instance("loglikelihood_rolling", None, (t,), i) for i, t in enumerate(TEXTS)]
        lm.loglikelihood_rolling(reqs, disable_tqdm=True)
    finally:
        lm.plan_observer = None
    return recorder


def test_position_rows_match_the_scheme_applied_to_their_tokens(lm):
    """Each row's statistics are those of the position scheme on that row's tokens: the
    recorder sees what the rotary embedding was given."""
    rec = _run(lm, positions="swap:0.2")
    scheme = parse("position", "swap:0.2")
    items = rec.realised()["items"]
    assert rec.realised()["unit"] == "row" and len(items) == len(TEXTS)
    for key, (row, values) in rec._rows.items():
        expected = scheme.apply(row, seed=5)
        assert np.array_equal(values, expected.values)
        item = next(i for i in items if i["key"] == key)
        assert item["fraction_moved"] == pytest.approx(expected.stats.fraction_moved)
        assert item["mean_displacement"] == pytest.approx(expected.stats.mean_displacement)
        assert item["idc"] == pytest.approx(expected.stats.idc)
    assert 0.05 < np.mean([i["fraction_moved"] for i in items]) < 0.4


def test_rope_noise_displacement_is_half_normal_and_qk_noise_has_none(lm):
    sigma = 1.5
    items = _run(lm, features=f"rope_noise:{sigma}").realised()["items"]
    shift = np.average([i["mean_displacement"] for i in items], weights=[i["n"] for i in items])
    tokens = sum(i["n"] for i in items)
    se = sigma * math.sqrt(1 - 2 / math.pi) / math.sqrt(tokens)
    assert abs(shift - sigma * math.sqrt(2 / math.pi)) < 4 * se + 1e-3  # float32 positions
    qk = _run(lm, features="qk_noise:0.3").realised()["items"]
    assert qk and all(math.isnan(i["mean_displacement"]) for i in qk)


def test_examples_are_the_rows_with_the_smallest_keys(lm):
    low = _run(lm, positions="swap:0.05").examples(lm.tokenizer)
    high = _run(lm, positions="swap:0.5").examples(lm.tokenizer)
    assert [e["key"] for e in low] == [e["key"] for e in high] and len(low) == 2
    assert len(high[0]["tokens"]) == len(high[0]["positions"])
    assert high[0]["positions"] != list(range(len(high[0]["positions"])))


def test_row_stats_by_hand():
    s = row_stats("k", np.array([0.0, 3.0, 2.0, 1.0]), 4)
    assert (s["fraction_moved"], s["mean_displacement"], s["idc"]) == (0.5, 1.0, 0.5)
    none = row_stats("k", None, 4)
    assert math.isnan(none["fraction_moved"]) and none["n"] == 4


def _documents(recorder: RowRecorder, task: str, doc_ids) -> dict[str, dict]:
    """The per-document items a cell record gets from ``recorder`` (keys ``test:<id>``)."""
    samples = [{"doc_id": d, "doc": {}} for d in sorted(doc_ids)]
    side = {"realised": recorder.realised(), "rows": []}
    record = realised_record("position", task, samples, "test", side)
    return {i["key"]: i for i in record["realised"]["documents"]}


def _weighted(parts: list[tuple[int, dict]]) -> dict[str, float]:
    """Token-weighted means of row statistics ``[(n, stats)]``."""
    total = sum(n for n, _ in parts)
    keys = ("fraction_moved", "mean_displacement", "dnd", "idc")
    return {"n": total, **{k: sum(n * s[k] for n, s in parts) / total for k in keys}}


def test_a_choice_document_gets_its_context_once(tiny_model_dir, hellaswag_requests):
    """Multiple choice (lm-eval's HellaSwag on local docs): each document's realised amount
    is the scheme's draw on its context tokens, counted once for its four endings; a
    second document with the same context shares that row."""
    lm = HFPosgenLM(pretrained=str(tiny_model_dir("llama")), device="cpu", batch_size=3)
    lm.set_perturbation(positions="swap:0.5", seed=5)
    twin = 99  # asks exactly what the first document asks
    first = hellaswag_requests[0].doc_id
    copies = [
        Instance("loglikelihood", r.doc, r.arguments, r.idx, ("hellaswag", twin, 1))
        for r in hellaswag_requests
        if r.doc_id == first
    ]
    recorder = RowRecorder()
    lm.plan_observer = recorder
    lm.loglikelihood(hellaswag_requests + copies, disable_tqdm=True)
    docs = {r.doc_id for r in hellaswag_requests} | {twin}
    got = _documents(recorder, "hellaswag", docs)
    assert sorted(got) == sorted(f"test:{d}" for d in docs)
    scheme = parse("position", "swap:0.5")
    for doc in docs - {twin}:
        req = next(r for r in hellaswag_requests if r.doc_id == doc)
        context, _ = lm._encode_pair(*req.args)
        expected = scheme.apply(np.array(context), seed=5).stats
        item = got[f"test:{doc}"]
        assert (item["n"], item["rows"]) == (len(context), 1)  # four endings, one row
        for k in ("fraction_moved", "mean_displacement", "dnd", "idc"):
            assert item[k] == pytest.approx(getattr(expected, k)), (doc, k)
    assert {k: v for k, v in got[f"test:{twin}"].items() if k != "key"} == {
        k: v for k, v in got[f"test:{first}"].items() if k != "key"
    }
    assert any(i["fraction_moved"] > 0 for i in got.values())


def test_a_rolling_document_gets_the_token_weighted_mean_of_its_windows(tiny_model_dir):
    """Rolling perplexity with short windows (max_length 48): windows of several documents
    share a batch, and each document gets the token-weighted mean of its own windows'
    statistics, each window's computed from the positions the scheme gives its tokens."""
    import lm_eval.utils

    lm = HFPosgenLM(
        pretrained=str(tiny_model_dir("llama")), device="cpu", batch_size=4, max_length=48
    )
    lm.set_perturbation(positions="swap:0.2", seed=5)
    reqs = [
        Instance("loglikelihood_rolling", {}, (t,), i, ("prose", 10 + i, 1))
        for i, t in enumerate(TEXTS)
    ]
    recorder = RowRecorder()
    lm.plan_observer = recorder
    lm.loglikelihood_rolling(reqs, disable_tqdm=True)
    got = _documents(recorder, "prose", [r.doc_id for r in reqs])
    scheme = parse("position", "swap:0.2")
    windows_per_doc = []
    for r in reqs:
        windows = lm_eval.utils.get_rolling_token_windows(
            lm.tok_encode(r.args[0]), lm.prefix_token_id, lm.max_length, 1
        )
        inputs = {tuple(a) for a, _ in windows}  # a repeated window counts once
        parts = [
            (len(a), row_stats("", scheme.apply(np.array(a), 5).values, len(a))) for a in inputs
        ]
        expected = _weighted(parts)
        item = got[f"test:{r.doc_id}"]
        assert item["rows"] == len(inputs) and item["n"] == expected["n"]
        for k in ("fraction_moved", "mean_displacement", "dnd", "idc"):
            assert item[k] == pytest.approx(expected[k]), (r.doc_id, k)
        windows_per_doc.append(len(inputs))
    assert max(windows_per_doc) > 2  # the long documents really span several windows


def test_rope_noise_displacement_per_document_is_half_normal(tiny_model_dir):
    sigma = 2.0
    lm = HFPosgenLM(pretrained=str(tiny_model_dir("llama")), device="cpu", batch_size=4)
    lm.set_perturbation(features=f"rope_noise:{sigma}", seed=5)
    texts = [t[:3000] for t in training_text() if len(t) > 3000][:4]
    reqs = [
        Instance("loglikelihood_rolling", {}, (t,), i, ("prose", i, 1)) for i, t in enumerate(texts)
    ]
    recorder = RowRecorder()
    lm.plan_observer = recorder
    lm.loglikelihood_rolling(reqs, disable_tqdm=True)
    got = _documents(recorder, "prose", range(len(texts)))
    assert len(got) == len(texts)
    for item in got.values():
        assert item["n"] > 300 and item["fraction_moved"] == 1.0
        se = sigma * math.sqrt(1 - 2 / math.pi) / math.sqrt(item["n"])
        assert abs(item["mean_displacement"] - sigma * math.sqrt(2 / math.pi)) < 5 * se + 1e-3


def test_recorders_of_two_ranks_merge_their_documents(lm):
    """A context two ranks both ran counts once, with the documents of both."""
    lm.set_perturbation(positions="swap:0.2", seed=5)
    ranks = []
    for docs in ((0, 1), (1, 2)):
        recorder = RowRecorder()
        lm.plan_observer = recorder
        reqs = [
            Instance("loglikelihood_rolling", {}, (TEXTS[d % 2],), d, ("prose", d, 1)) for d in docs
        ]
        lm.loglikelihood_rolling(reqs, disable_tqdm=True)
        lm.plan_observer = None
        ranks.append(recorder)
    merged = RowRecorder().merge([r.state() for r in ranks])
    items = merged.realised()["items"]
    assert len(items) == 2  # the rows of TEXTS[0] and TEXTS[1]
    assert sorted(map(tuple, (d for i in items for d in i["docs"]))) == [
        ("prose", 0),
        ("prose", 1),
        ("prose", 2),
    ]
    both = next(i for i in items if len(i["docs"]) == 2)
    assert both["docs"] == [["prose", 0], ["prose", 2]]
