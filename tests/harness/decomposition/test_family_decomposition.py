"""The decomposition on the non-rotary position families: logits captured from the
model's own forward (ALiBi's bias included), planted truths, the family in the table."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from capture_checks import check_probabilities
from posgen.harness.additive_fit.logit_fit_reference import reference_fit
from posgen.harness.decomposition.pipeline import decompose_model, head_logit_maps
from posgen.harness.model_side.alibi.capture import capture_alibi_attention
from tiny_models import build_model, build_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


@pytest.mark.parametrize("arch", ["gpt2", "opt"])
def test_absolute_models_captured_logits_are_their_own(arch):
    ids = torch.randint(3, 384, (2, 20), generator=torch.Generator().manual_seed(0))
    seen = check_probabilities(build_model(arch), ids)
    assert len(seen) == 2


def test_alibi_captured_logits_are_the_models_own_with_and_without_the_bias():
    model = build_model("bloom")
    ids = torch.randint(3, 384, (2, 16), generator=torch.Generator().manual_seed(0))
    seen = {}

    def consumer(cap) -> None:
        full, qk = cap.logits, cap.part(include_bias=False).logits
        seen[cap.layer] = (full.clone(), qk.clone(), cap.bias.clone())

    with torch.no_grad():
        ref = model(ids, use_cache=False, output_attentions=True)
        with capture_alibi_attention(model, consumer):
            out = model(ids, use_cache=False)
    assert torch.equal(out.logits, ref.logits)  # the capture leaves the forward alone
    causal = torch.ones(16, 16, dtype=torch.bool).tril()
    slopes = 2.0 ** (-8.0 * torch.arange(1, 5) / 4)  # BLOOM's for 4 heads
    for layer, (full, qk, bias) in seen.items():
        probs = torch.softmax(full.masked_fill(~causal, float("-inf")), dim=-1)
        torch.testing.assert_close(probs, ref.attentions[layer], rtol=0, atol=1e-6)
        torch.testing.assert_close(full, qk + bias, rtol=0, atol=1e-5)
        torch.testing.assert_close(bias[0, :, 0], slopes[:, None] * torch.arange(16.0))


def test_mpt_captured_logits_are_its_own_with_and_without_the_bias():
    """MPT's logits recorded where its attention adds its batch bias: their masked softmax
    is its own attention weights bit for bit, q·k (its Wqkv split as it splits it) plus
    the bias is them, and the bias is MPT's m_h·(j − n + 1), slopes 2^(−2h) for 4 heads."""
    model = build_model("mpt")
    ids = torch.randint(3, 384, (2, 16), generator=torch.Generator().manual_seed(0))
    seen = {}

    def consumer(cap) -> None:
        seen[cap.layer] = (cap.logits.clone(), cap.part(include_bias=False).logits.clone())
        seen[cap.layer] += (cap.bias.clone(),)

    with torch.no_grad():
        ref = model(ids, use_cache=False, output_attentions=True)
        with capture_alibi_attention(model, consumer):
            out = model(ids, use_cache=False)
    assert torch.equal(out.logits, ref.logits) and sorted(seen) == [0, 1]
    causal = torch.ones(16, 16, dtype=torch.bool).tril()
    slopes = 2.0 ** (-2.0 * torch.arange(1, 5))
    for layer, (full, qk, bias) in seen.items():
        probs = torch.softmax(full.masked_fill(~causal, float("-inf")), dim=-1)
        assert torch.equal(probs, ref.attentions[layer])
        torch.testing.assert_close(full, qk + bias, rtol=0, atol=1e-6)
        torch.testing.assert_close(bias[0, :, 0], slopes[:, None] * (torch.arange(16.0) - 15))


def test_mpt_capture_after_a_kv_cache_is_refused():
    """q and k come from the forward's own tokens: a forward after a cache (its keys
    longer than its queries) cannot be recorded as one, and says so."""
    model = build_model("mpt")
    ids = torch.randint(3, 384, (1, 12), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        first = model(ids[:, :10], use_cache=True)
        with (
            pytest.raises(RuntimeError, match="without a KV cache"),
            capture_alibi_attention(model, lambda cap: None),
        ):
            model(ids[:, 10:], cache=first.past_key_values, use_cache=True)


def _zero_qk(model) -> None:
    """q·k = 0: BLOOM's query and key weights and biases, MPT's Wqkv query and key rows."""
    with torch.no_grad():
        if model.config.model_type == "mpt":
            for block in model.transformer.blocks:
                block.attn.Wqkv.weight[: 2 * 64].zero_()  # rows: q, k, v (d_model 64)
            return
        for block in model.transformer.h:
            qkv = block.self_attention.query_key_value
            w = qkv.weight.view(4, 3, 16, 64)  # heads × (q, k, v) × head_dim × hidden
            w[:, :2].zero_()
            qkv.bias.view(4, 3, 16)[:, :2].zero_()


@pytest.mark.parametrize("arch", ["bloom", "mpt"])
def test_alibi_planted_truth_the_bias_alone_is_exactly_additive(arch, tok):
    """q·k = 0: the full logits are the bias alone (BLOOM's m_h·j, MPT's m_h·(j − n + 1)),
    fitted exactly (r = 1); the content part is zero."""
    model = build_model(arch)
    _zero_qk(model)
    table = decompose_model(model, tokenizer=tok, docs=1, tokens=32, progress=False)
    assert set(table["position_family"]) == {"alibi"}
    full, qk = table[table["logit_part"] == "full"], table[table["logit_part"] == "qk"]
    assert len(full) == len(qk) == 2 * 4
    np.testing.assert_allclose(full["r_3axis"], 1.0, atol=1e-6)
    np.testing.assert_allclose(qk["logit_std"], 0.0, atol=1e-9)


def test_alibi_fits_differ_with_and_without_the_bias(tok):
    table = decompose_model(build_model("bloom"), tokenizer=tok, docs=1, tokens=32, progress=False)
    full = table[table["logit_part"] == "full"].set_index(["layer", "head"])
    qk = table[table["logit_part"] == "qk"].set_index(["layer", "head"])
    assert (full["r_3axis"] > qk["r_3axis"]).all()  # random q·k: the bias is the structure


def test_absolute_model_one_head_matches_the_reference_solve(tok):
    model = build_model("gpt2", seed=1)
    table = decompose_model(model, tokenizer=tok, docs=1, tokens=32, progress=False)
    assert set(table["position_family"]) == {"absolute"} and set(table["logit_part"]) == {"full"}
    actual, fitted = head_logit_maps(model, tok, tokens=32, layer=1, head=2)
    mask = ~np.isnan(actual)
    ref = reference_fit(np.nan_to_num(actual), mask)
    row = table[(table["layer"] == 1) & (table["head"] == 2)].iloc[0]
    assert abs(row["r_3axis"] - ref["r"]) < 1e-6
    np.testing.assert_allclose(fitted[mask], ref["fitted"], atol=1e-5)


def test_alibi_head_map_is_of_the_full_logits(tok):
    model = build_model("bloom", seed=1)
    table = decompose_model(model, tokenizer=tok, docs=1, tokens=32, progress=False)
    actual, _ = head_logit_maps(model, tok, tokens=32, layer=0, head=1)
    ref = reference_fit(np.nan_to_num(actual), ~np.isnan(actual))
    full = table[(table["logit_part"] == "full") & (table["layer"] == 0) & (table["head"] == 1)]
    assert abs(full["r_3axis"].iloc[0] - ref["r"]) < 1e-6
