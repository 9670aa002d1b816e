"""MPT's batch bias added per row and Falcon's bias folded into its mask
(:mod:`posgen.harness.model_side.alibi.rows`), on tiny random models (CPU, seconds): each
path is the model's own arithmetic at natural positions, whatever the padding and
attention implementation, and refuses a model whose code no longer takes the bias where
posgen hands it."""

from __future__ import annotations

import pytest
import torch

from posgen.harness.model_side.positions.non_rotary import family_positions
from posgen.harness.position_family import position_family_of
from tiny_models import build_model

IDS = torch.randint(3, 384, (3, 18), generator=torch.Generator().manual_seed(0))


def _left_padded() -> tuple[torch.Tensor, torch.Tensor]:
    """A mask of rows with 0, 4 and 9 padding tokens on the left, and each row's natural
    positions (its count of real tokens, 0 on padding)."""
    mask = torch.ones_like(IDS)
    mask[1, :4] = 0
    mask[2, :9] = 0
    return mask, (mask.cumsum(-1) - 1) * mask


@pytest.mark.parametrize(
    ("name", "attention"), [("mpt", None), ("falcon_alibi", "sdpa"), ("falcon_alibi", "eager")]
)
def test_natural_positions_give_the_models_own_output_padded_or_not(name, attention):
    """Falcon (sdpa, or eager, which adds the bias a second time) is bit for bit its own
    at natural positions, left padding included; MPT, whose own bias counts columns
    (padding too), differs on a padded row only by a per-query constant softmax ignores."""
    model = build_model(name, attention=attention)
    assert attention in (None, model.config._attn_implementation)
    mask, natural = _left_padded()
    with torch.no_grad():
        plain = model(IDS).logits
        padded = model(IDS, attention_mask=mask).logits
        with family_positions(model, torch.arange(IDS.shape[1]).expand_as(IDS)):
            assert torch.equal(model(IDS).logits, plain)
        with family_positions(model, natural):
            hooked = model(IDS, attention_mask=mask).logits
    if position_family_of(model).name == "falcon":
        assert torch.equal(hooked, padded)
    else:
        assert torch.equal(hooked[0], padded[0])
        torch.testing.assert_close(hooked, padded, rtol=0, atol=1e-5)


@pytest.mark.parametrize("name", ["mpt", "falcon_alibi"])
def test_every_head_chosen_is_the_global_path_and_one_head_moves_alone(name):
    model = build_model(name)
    model.set_attn_implementation("eager")  # the attention weights (sdpa returns none)
    heads = int(model.config.num_attention_heads)
    swapped = torch.stack([torch.randperm(18) for _ in range(3)])
    attention: list[torch.Tensor] = []
    with torch.no_grad():
        plain = model(IDS, output_attentions=True).attentions[0]
        with family_positions(model, swapped):
            moved = model(IDS, output_attentions=True).attentions[0]
        with family_positions(model, swapped, heads=range(heads)):
            assert torch.equal(model(IDS, output_attentions=True).attentions[0], moved)
        with family_positions(model, swapped, heads=[1]):
            attention = model(IDS, output_attentions=True).attentions[0]
    assert torch.equal(attention[:, [0, 2, 3]], plain[:, [0, 2, 3]])
    torch.testing.assert_close(attention[:, 1], moved[:, 1], rtol=0, atol=1e-6)
    assert not torch.allclose(attention[:, 1], plain[:, 1])


def test_mpt_attention_that_never_adds_the_bias_is_refused(monkeypatch):
    from transformers.models.mpt import modeling_mpt

    own = modeling_mpt.MptAttention.forward

    def plain_bias(self, hidden_states, position_bias, *args, **kwargs):
        return own(self, hidden_states, position_bias.as_subclass(torch.Tensor), *args, **kwargs)

    monkeypatch.setattr(modeling_mpt.MptAttention, "forward", plain_bias)
    model = build_model("mpt")
    natural = torch.arange(18).expand_as(IDS)
    with (
        pytest.raises(RuntimeError, match="never added its position_bias"),
        torch.no_grad(),
        family_positions(model, natural),
    ):
        model(IDS)


def test_falcon_mask_that_does_not_fold_the_bias_is_refused():
    model = build_model("falcon_alibi")
    layer = position_family_of(model).blocks(model)[0]

    def unfolded(module, args, kwargs):
        return args, {**kwargs, "attention_mask": kwargs["attention_mask"] * 0.5}

    handle = layer.register_forward_pre_hook(unfolded, with_kwargs=True)
    natural = torch.arange(18).expand_as(IDS)
    with (
        pytest.raises(RuntimeError, match=r"is not masked_fill\(alibi"),
        torch.no_grad(),
        family_positions(model, natural),
    ):
        model(IDS)
    handle.remove()
