"""hf-posgen on models whose positions end at a config field: a learned table's rows
(GPT-2's ``n_positions``, OPT's ``max_position_embeddings``) or the keys of MPT's ALiBi
bias (``max_seq_len``). Every forward lm-eval runs stays within them, and a
``max_length=`` past them is refused before weights load."""

from __future__ import annotations

import math

import pytest
from lm_eval.api.instance import Instance
from lm_eval.models.huggingface import HFLM

from posgen.harness.hf_posgen.model import HFPosgenLM
from posgen.perturbations.base import PerturbationError
from tiny_models import SHORT_TABLE, training_text

LONG = training_text()[0]  # 637 tokens: 5 rolling windows of 128


def _rolling(lm: HFPosgenLM) -> list[float]:
    request = Instance("loglikelihood_rolling", {}, (LONG,), 0)
    return lm.loglikelihood_rolling([request])


@pytest.mark.parametrize("arch", ["gpt2", "opt", "mpt"])
def test_every_forward_stays_within_the_positions_the_model_takes(short_table_dir, arch):
    """lm-eval reads GPT-2's and OPT's length from their config, not MPT's max_seq_len
    (it would cut windows of 2048 tokens, past MPT's bias): hf-posgen holds it."""
    lm = HFPosgenLM(pretrained=str(short_table_dir(arch)), device="cpu", batch_size=2)
    seen: list[int] = []
    lm.model.register_forward_pre_hook(
        lambda module, args, kwargs: seen.append(kwargs.get("input_ids", args[0]).shape[1]),
        with_kwargs=True,
    )
    (nll,) = _rolling(lm)
    assert lm.max_length == SHORT_TABLE
    assert max(seen) <= SHORT_TABLE and len(seen) > 1
    assert math.isfinite(nll)


@pytest.mark.parametrize("arch", ["gpt2", "mpt"])
def test_a_max_length_past_the_positions_is_refused_before_weights_load(
    short_table_dir, monkeypatch, arch
):
    path = str(short_table_dir(arch))
    field = {"gpt2": "n_positions", "mpt": "max_seq_len"}[arch]
    own = HFLM.__init__
    monkeypatch.setattr(HFLM, "__init__", lambda *a, **k: pytest.fail("weights loaded"))
    with pytest.raises(PerturbationError) as refused:
        HFPosgenLM(pretrained=path, device="cpu", max_length=2 * SHORT_TABLE)
    message = str(refused.value)
    assert f"max_length={2 * SHORT_TABLE}: the model's config sets {field} = 128" in message
    assert "give max_length <= 128" in message and "\n" not in message
    monkeypatch.setattr(HFLM, "__init__", own)
    assert HFPosgenLM(pretrained=path, device="cpu", max_length=64).max_length == 64
