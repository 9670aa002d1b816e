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
