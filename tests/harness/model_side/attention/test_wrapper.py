"""The one wrapper of hf-posgen's attention functions (tiny Llama, CPU): registration,
the model's own function, install and removal (also after an error), dispatch per layer."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from posgen.compat import attn_implementation, base_implementation
from posgen.harness.model_family import family_of, rotary_modules
from posgen.harness.model_side.attention.wrapper import (
    ALL_ATTENTION_FUNCTIONS,
    OwnAttention,
    WrappedAttention,
    own_attention_function,
    wrappable,
)
from tiny_models import CONFIGS

IDS = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12]])
seen_calls: list[tuple[object, int, str]] = []  # (state, layer, base) of every call


def _recording_call(state, own: OwnAttention, module, query, key, value, mask, **kwargs):
    seen_calls.append((state, int(module.layer_idx), own.base))
    return own(module, query, key, value, mask, **kwargs)


RECORDING = WrappedAttention(
    "posgen_test_recording_", "the test wrapper", "the test's block", _recording_call
)


def _model(implementation: str) -> torch.nn.Module:
    torch.manual_seed(0)
    config = AutoConfig.for_model("llama", **CONFIGS["llama"])
    model = AutoModelForCausalLM.from_config(
        config, dtype=torch.float32, attn_implementation=implementation
    )
    return model.eval()


@pytest.fixture(params=["sdpa", "eager"])
def model(request):
    return _model(request.param)


def _logits(model) -> torch.Tensor:
    with torch.no_grad():
        return model(IDS).logits


def test_the_wrapper_calls_the_models_own_attention_bit_for_bit_layer_by_layer(model):
    plain, base = _logits(model), attn_implementation(model)
    seen_calls.clear()
    with RECORDING.active(model, "state") as wrapped:
        assert wrapped == base
        assert attn_implementation(model) == RECORDING.name(base)
        assert base_implementation(model) == base  # seen through the wrapper
        assert RECORDING.current() == "state"
        inside = _logits(model)
    assert torch.equal(inside, plain)
    assert seen_calls == [("state", 0, base), ("state", 1, base)]
    assert attn_implementation(model) == base and RECORDING.current() is None


def test_leaving_the_block_after_an_error_restores_the_model_and_removes_the_hooks(model):
    base = attn_implementation(model)
    rotary = rotary_modules(model)[0]
    seen = []

    def hook(module, args, kwargs, output):
        seen.append(module)

    with pytest.raises(KeyError, match="inside"), RECORDING.active(model, 1, [(rotary, hook)]):
        _logits(model)
        assert seen == [rotary]
        raise KeyError("inside")
    assert attn_implementation(model) == base
    assert RECORDING.current() is None
    assert not rotary._forward_hooks  # the hook is gone
    _logits(model)
    assert seen == [rotary]


def test_a_call_outside_the_block_is_an_error(model):
    base = attn_implementation(model)
    with RECORDING.active(model, None):  # registered (once per process), then left
        pass
    model.set_attn_implementation(RECORDING.name(base))
    try:
        with pytest.raises(RuntimeError, match="called outside the test's block"):
            _logits(model)
    finally:
        model.set_attn_implementation(base)


def test_nested_blocks_restore_the_outer_state():
    model = _model("sdpa")
    with RECORDING.active(model, "outer"):
        with RECORDING.active(model, "inner"):
            assert RECORDING.current() == "inner"
        assert RECORDING.current() == "outer"
        assert attn_implementation(model) == RECORDING.name("sdpa")
    assert attn_implementation(model) == "sdpa"


def test_the_models_own_function_and_what_can_be_wrapped():
    module = _model("eager").model.layers[0].self_attn
    assert own_attention_function("sdpa", module) is ALL_ATTENTION_FUNCTIONS["sdpa"]
    eager = family_of(module).eager_attention_function(module)
    assert own_attention_function("eager", module) is eager
    assert wrappable("eager", "x") == "eager" and wrappable("sdpa", "x") == "sdpa"
    with pytest.raises(ValueError, match=r"the test wrapper cannot wrap .*'nowhere'"):
        wrappable("nowhere", "the test wrapper")


def test_an_implementation_it_cannot_wrap_is_refused_before_any_hook(monkeypatch):
    model = _model("sdpa")
    rotary = rotary_modules(model)[0]
    monkeypatch.setattr(model.config, "_attn_implementation", "nowhere")
    with (
        pytest.raises(ValueError, match="cannot wrap"),
        RECORDING.active(model, 1, [(rotary, lambda *a: None)]),
    ):
        pass
    assert not rotary._forward_hooks
