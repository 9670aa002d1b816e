"""Model-family conventions: every tested RoPE family resolves its own code by name."""

from __future__ import annotations

import pytest
import torch

from posgen.harness.model_side.family import (
    GENERIC,
    ModelFamily,
    NoRotaryEmbeddingError,
    family_of,
    register_family,
    require_rotary,
    rotary_modules,
)
from tiny_models import ROPE_ARCHS, build_model


@pytest.mark.parametrize("arch", ROPE_ARCHS)
def test_each_tested_family_finds_its_own_modules_and_functions(arch):
    model = build_model(arch)
    family = family_of(model)
    assert family is not GENERIC and arch in family.model_types
    assert len(rotary_modules(model)) >= 1
    attention = family.attention_modules(model)
    assert [m.layer_idx for m in attention] == [0, 1]
    assert family_of(attention[0]) is family
    module = attention[0]
    assert family.eager_attention_function(module).__module__ == type(module).__module__
    assert family.apply_rotary_function(module).__module__ == type(module).__module__
    key = torch.randn(1, 2, 5, 16)
    assert family.expand_kv(module, key, 4).shape == (1, 4, 5, 16)


def test_a_model_without_rope_gets_a_clear_error():
    with pytest.raises(NoRotaryEmbeddingError, match="'gpt2' model has none"):
        require_rotary(build_model("gpt2"), "positions=swap:0.1")


def test_a_missing_function_names_the_family_to_register():
    module = build_model("llama").model.layers[0].self_attn
    renamed = ModelFamily("llama-like", (), eager_attention="no_such_attention")
    with pytest.raises(RuntimeError, match="register_family"):
        renamed.eager_attention_function(module)


def test_a_model_type_belongs_to_one_family():
    with pytest.raises(ValueError, match="already belongs to 'llama'"):
        register_family(ModelFamily("other", ("llama",)))
    # one registry: a rotary entry cannot claim a model type another kind holds
    with pytest.raises(ValueError, match="already belongs to 'gpt2'"):
        register_family(ModelFamily("other", ("gpt2",)))
