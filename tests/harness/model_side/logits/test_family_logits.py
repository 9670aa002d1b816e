"""``logits=`` on learned absolute positions (GPT-2): its attention runs through
transformers' attention functions, so the replacement by the additive fit applies as on
RoPE models. Planted truth: an exactly additive GPT-2 is unchanged by its fit."""

from __future__ import annotations

import torch

from posgen.harness.model_side.logits.forms import LogitForm
from posgen.harness.model_side.logits.replacement import LogitReplacement, logits_replaced
from tiny_models import build_model


def _additive_gpt2() -> torch.nn.Module:
    """GPT-2 whose queries are one constant vector: q·k_j depends on the key alone, an
    exact c[j], so every head's logits are exactly additive."""
    model = build_model("gpt2")
    width = model.config.n_embd
    with torch.no_grad():
        for block in model.transformer.h:
            block.attn.c_attn.weight[:, :width] = 0.0  # Conv1D: [in, 3·width], q first
            block.attn.c_attn.bias[:width] = 1.0
    return model


def _run(model, ids, form: str | None) -> torch.Tensor:
    with torch.no_grad():
        if form is None:
            return model(ids).logits
        with logits_replaced(model, LogitReplacement(LogitForm(form))):
            return model(ids).logits


def test_an_exactly_additive_gpt2_is_unchanged_by_its_fit():
    model = _additive_gpt2()
    ids = torch.randint(3, 384, (1, 40), generator=torch.Generator().manual_seed(0))
    plain = _run(model, ids, None)
    assert (_run(model, ids, "additive") - plain).abs().max() < 1e-5 * plain.abs().max()
    alone = _run(model, ids, "distance")  # the distance term alone is not the model
    assert (alone - plain).abs().max() > 1e-3 * plain.abs().max()


def test_a_random_gpt2_is_changed_by_its_fit():
    model = build_model("gpt2")
    ids = torch.randint(3, 384, (1, 40), generator=torch.Generator().manual_seed(0))
    plain = _run(model, ids, None)
    assert not torch.allclose(_run(model, ids, "additive"), plain, atol=1e-4)
