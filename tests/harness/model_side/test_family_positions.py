"""What a position family says the commands may read of its logits."""

from __future__ import annotations

from dataclasses import replace

import pytest

from posgen.harness.model_side.family import ModelFamily, family_of_config, register_family


def _family(**settings) -> ModelFamily:
    return family_of_config(settings.get)


def test_every_built_in_family_has_its_logits_read():
    for settings in (
        {"model_type": "gpt2"},
        {"model_type": "opt"},
        {"model_type": "bloom"},
        {"model_type": "mpt"},
        {"model_type": "falcon", "alibi": True},
        {"model_type": "llama"},
    ):
        assert _family(**settings).logits_refused == "", settings


def test_a_registered_refusal_or_an_unread_alibi_form_is_refused_with_its_reason():
    bloom = _family(model_type="bloom")
    assert replace(bloom, logits_refusal="not fitted").logits_refused == "not fitted"
    other = ModelFamily("other", ("other-alibi",), kind="alibi", bias_form="other")
    assert "reads no ALiBi logits of the form 'other'" in other.logits_refused


def test_a_model_type_belongs_to_one_family():
    with pytest.raises(ValueError, match="already belongs to 'bloom'"):
        register_family(ModelFamily("mine", ("bloom",), kind="alibi"))


def test_the_tokens_one_forward_takes_are_bounded_by_a_table_or_a_bias_built_once():
    from types import SimpleNamespace

    from posgen.harness.model_side.family import length_limit

    def limit(**settings):
        return length_limit(SimpleNamespace(**settings))

    assert limit(model_type="gpt2", n_positions=128) == ("n_positions", 128)
    assert limit(model_type="opt", max_position_embeddings=64) == ("max_position_embeddings", 64)
    assert limit(model_type="mpt", max_seq_len=2048) == ("max_seq_len", 2048)
    # RoPE runs past its trained context; BLOOM's and Falcon's bias is built from the mask
    assert limit(model_type="llama", max_position_embeddings=2048) is None
    assert limit(model_type="bloom") is None
    assert limit(model_type="falcon", alibi=True, max_position_embeddings=2048) is None
