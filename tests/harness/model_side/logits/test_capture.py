"""Capture from the model's own forward: softmax of the captured logits = the model's own
attention probabilities, on tiny models of every RoPE family and on the embedded model."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoModelForCausalLM

from capture_checks import check_probabilities
from posgen.harness.model_side.logits import capture
from posgen.harness.model_side.logits.capture import (
    CAPTURE_NAME,
    capture_attention,
    capture_forward,
)
from tiny_models import ROPE_ARCHS, build_model


@pytest.mark.parametrize("arch", ROPE_ARCHS)
def test_softmax_of_captured_logits_equals_model_attention(arch):
    model = build_model(arch, seed=0)
    ids = torch.randint(3, 384, (2, 20), generator=torch.Generator().manual_seed(0))
    seen = check_probabilities(model, ids)
    heads = model.config.num_attention_heads
    for shape, attended, _ in seen.values():
        assert shape == (2, heads, 20, 20)  # grouped KV heads expanded
        assert not attended.triu(1).any()  # causal


@pytest.mark.parametrize("arch", ["gemma2", "gemma3_text"])
def test_sliding_window_layers_pass_their_window(arch):
    model = build_model(arch, seed=0)
    seen = check_probabilities(model, torch.randint(3, 384, (1, 24)))
    window = model.config.sliding_window
    i = torch.arange(24)
    dist = i[:, None] - i[None, :]
    assert torch.equal(seen[0][1], (dist >= 0) & (dist < window))  # sliding layer
    assert torch.equal(seen[1][1], dist >= 0)  # full layer


def test_layers_with_one_mask_share_one_attended_tensor():
    model = build_model("llama", seed=0)
    ids = torch.randint(3, 384, (1, 12), generator=torch.Generator().manual_seed(0))
    seen: list[list[torch.Tensor]] = []

    def consumer(cap) -> None:
        seen[-1].append(cap.attended)

    with torch.no_grad(), capture_attention(model, consumer):
        for pad in (0, 3):  # second forward: left padding changes the mask
            seen.append([])
            mask = torch.ones_like(ids)
            mask[:, :pad] = 0
            model(ids, attention_mask=mask, use_cache=False)
    first, second = seen
    assert len(first) == model.config.num_hidden_layers
    assert all(t is first[0] for t in first) and all(t is second[0] for t in second)
    assert not torch.equal(first[0], second[0])
    assert not second[0][0, 0, :, :3].any() and first[0][0, 0, -1].all()


def test_capture_is_undone_after_an_error_and_refuses_outside_use():
    model = build_model("llama", seed=0)
    model.set_attn_implementation("sdpa")

    def failing(cap) -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError, match="boom"), capture_attention(model, failing):
        model(torch.randint(3, 384, (1, 8)), use_cache=False)
    assert model.config._attn_implementation == "sdpa"
    model.set_attn_implementation(CAPTURE_NAME)
    with pytest.raises(RuntimeError, match="only valid inside"):
        model(torch.randint(3, 384, (1, 8)), use_cache=False)


def test_unrotate_recovers_position_free_keys():
    """Layer 0 keys of one repeated token are identical before RoPE: undoing the model's
    own rotation must make them equal at every position (and differ after it)."""
    model = build_model("llama", seed=0)
    kept = {}

    def consumer(cap) -> None:
        if cap.layer == 0:
            kept["post"], kept["pre"] = cap.key.clone(), cap.unrotate(cap.key)
            kept["again"] = cap.rotate(kept["pre"])

    with torch.no_grad(), capture_attention(model, consumer):
        model(torch.full((1, 16), 7), use_cache=False)
    pre, post = kept["pre"][0], kept["post"][0]
    torch.testing.assert_close(pre, pre[:, :1].expand_as(pre), rtol=0, atol=1e-5)
    assert (post - post[:, :1]).abs().max() > 1e-2
    torch.testing.assert_close(kept["again"], kept["post"], rtol=0, atol=1e-5)


def test_learned_absolute_positions_have_no_rotation_to_undo():
    """GPT-2's q·k carries no rotation (posgen.harness.position_family): un-rotating and
    rotating are the identity, not an error."""
    model = build_model("gpt2", seed=0)
    seen = []

    def consumer(cap) -> None:
        seen.append(torch.equal(cap.unrotate(cap.key), cap.key))
        seen.append(torch.equal(cap.rotate(cap.key), cap.key))

    with torch.no_grad(), capture_attention(model, consumer):
        model(torch.randint(3, 384, (1, 8)), use_cache=False)
    assert seen == [True] * 4


@pytest.mark.slow
def test_embedded_model_capture_matches_its_attention(embedded_model_dir):
    model = AutoModelForCausalLM.from_pretrained(embedded_model_dir, dtype=torch.float32).eval()
    ids = torch.randint(100, 40000, (1, 64), generator=torch.Generator().manual_seed(0))
    seen = check_probabilities(model, ids, atol=1e-5)
    assert len(seen) == 30 and seen[0][0] == (1, 9, 64, 64)


@pytest.mark.parametrize("arch", ["llama", "gemma2"])  # gemma2: soft-capping, sliding window
def test_eager_attention_in_row_blocks_keeps_the_outputs(monkeypatch, arch):
    model = build_model(arch, seed=0)
    ids = torch.randint(3, 384, (2, 23), generator=torch.Generator().manual_seed(1))
    heads = model.config.num_attention_heads
    monkeypatch.setattr(capture, "ATTENTION_BLOCK_BYTES", 4 * 2 * heads * 23 * 4)  # 4 rows
    blocks = []

    def consumer(cap) -> None:
        full = cap.logits
        block = cap.logit_block(5, 9, heads=slice(1, 3), width=11)
        torch.testing.assert_close(block, full[:, 1:3, 5:9, :11], rtol=0, atol=1e-6)
        blocks.append(cap.layer)

    model.set_attn_implementation("eager")
    with torch.no_grad():
        ref = model(ids, use_cache=False)
        with capture_attention(model, consumer):
            out = model(ids, use_cache=False)
    assert blocks == list(range(model.config.num_hidden_layers))
    torch.testing.assert_close(out.logits, ref.logits, rtol=0, atol=1e-5)


def _hidden(model, ids, mask=None) -> torch.Tensor:
    with torch.no_grad():
        return model.base_model(input_ids=ids, attention_mask=mask, use_cache=False)[0]


@pytest.mark.parametrize("arch", [a for a in ROPE_ARCHS if a != "gemma2"])  # gemma2: eager
def test_captured_sdpa_forward_is_bit_identical_to_the_plain_one(arch):
    """The model runs sdpa: the captured forward's outputs are transformers' own sdpa
    outputs with the model's own mask, bit for bit, padded or not (gemma3: a sliding
    layer), and an unpadded causal layer reaches the consumer without a mask built."""
    model = build_model(arch, seed=0)
    assert model.config._attn_implementation == "sdpa"
    ids = torch.randint(3, 384, (2, 21), generator=torch.Generator().manual_seed(2))
    padded = torch.ones_like(ids)
    padded[1, :4] = 0  # left padding in the second row
    for mask, causal in ((None, True), (padded, False)):
        seen = []

        def consumer(cap, seen=seen) -> None:
            seen.append(cap.causal)
            cap.logit_block(0, 3)  # the consumer reads the logits; the outputs do not change

        ref = _hidden(model, ids, mask)
        with capture_attention(model, consumer):
            out = _hidden(model, ids, mask)
        assert torch.equal(out, ref), arch
        sliding = [arch == "gemma3_text", False]  # gemma3's layer 0: a window of 8 < 21
        assert seen == [causal and not s for s in sliding]


def test_causal_layers_build_no_mask_and_fit_as_with_the_built_mask(monkeypatch):
    """With sdpa's mask function an unpadded causal forward builds no n × n mask for the
    capture or the fit, and the fit equals the one made from the built mask."""
    from posgen.harness.decomposition.pipeline import decompose_model
    from tiny_models import build_tokenizer

    tok, model = build_tokenizer(), build_model("qwen2", seed=1)
    free = decompose_model(model, tokenizer=tok, docs=1, tokens=40, progress=False, context=25)

    def refuse(self, window=None):
        raise AssertionError("an n × n mask was built")

    with monkeypatch.context() as patch:
        patch.setattr(capture.LayerMask, "attended", refuse)
        again = decompose_model(model, tokenizer=tok, docs=1, tokens=40, progress=False)
    assert (again["fit_mask"] == "causal").all()
    monkeypatch.setattr(capture.LayerCapture, "causal", property(lambda self: False))
    built = decompose_model(model, tokenizer=tok, docs=1, tokens=40, progress=False, context=25)
    pd_cols = ["r_3axis", "r_2axis", "r_distance_key", "share_distance", "r_3axis_past_context"]
    for col in pd_cols:
        torch.testing.assert_close(
            torch.tensor(free[col].values), torch.tensor(built[col].values), rtol=0, atol=1e-12
        )


def test_a_consumer_can_replace_the_attention_output(monkeypatch):
    """A consumer that returns the layer's output replaces the model's attention: softmax
    of the captured logits times the value states gives the plain forward (to float
    rounding) without the model's own attention running; a wrong shape is refused."""
    model = build_model("qwen2", seed=0)  # grouped KV heads
    ids = torch.randint(3, 384, (1, 17), generator=torch.Generator().manual_seed(3))
    calls = []
    own = capture._model_attention
    monkeypatch.setattr(
        capture, "_model_attention", lambda *a, **k: calls.append(1) or own(*a, **k)
    )

    def attend(cap) -> torch.Tensor:
        logits = cap.logits.masked_fill(~cap.attended, float("-inf"))
        value = cap.expanded_value()  # [1, H, n, d_v]
        return (torch.softmax(logits, dim=-1) @ value).transpose(1, 2)

    ref = _hidden(model, ids)
    with capture_attention(model, attend):
        out = _hidden(model, ids)
    torch.testing.assert_close(out, ref, rtol=0, atol=1e-5)
    assert not calls
    with capture_attention(model, lambda cap: torch.zeros(1, 17, 4, 16)):
        zeroed = _hidden(model, ids)
    assert not torch.allclose(zeroed, ref, atol=1e-3)
    with (
        pytest.raises(ValueError, match=r"attention output \[B, n, H, d_v\]"),
        capture_attention(model, lambda cap: torch.zeros(1, 4, 17, 16)),
    ):
        _hidden(model, ids)


def test_capture_forward_skips_the_lm_head():
    model = build_model("llama", seed=0)
    heads = []
    handle = model.lm_head.register_forward_hook(lambda *a: heads.append(1))
    layers = []
    try:
        capture_forward(model, list(range(3, 30)), lambda cap: layers.append(cap.layer))
    finally:
        handle.remove()
    assert layers == [0, 1] and not heads
