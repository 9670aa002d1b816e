"""The mask a layer received (sdpa's mask function): what the capture derives from it
equals what transformers' own eager mask function builds."""

from __future__ import annotations

import torch
from transformers.masking_utils import eager_mask, sdpa_mask

from posgen.harness.model_side.logits.layer_mask import LayerMask


def _mask(padding: torch.Tensor | None, n: int) -> LayerMask:
    padding = None if padding is None else padding.bool()  # as the model passes it
    built = sdpa_mask(batch_size=2, q_length=n, kv_length=n, attention_mask=padding)
    return LayerMask(built, 2, n, n, causal=True, device=torch.device("cpu"))


def test_unbuilt_causal_mask_gives_eager_masks_blocks_and_the_causal_pattern():
    n = 11
    layer = _mask(None, n)
    assert layer.mask is None and layer.sees_every_key()  # sdpa's causal kernel masks
    eager = eager_mask(batch_size=2, q_length=n, kv_length=n, dtype=torch.float32)
    whole = layer.additive(0, n, torch.float32)
    assert torch.equal(whole.expand_as(eager), eager)
    assert torch.equal(layer.additive(3, 7, torch.float32)[0, 0], eager[0, 0, 3:7])
    attended = layer.attended()
    assert attended.shape == (2, 1, n, n) and torch.equal(attended[1, 0], eager[1, 0] == 0)
    assert layer.attended() is attended  # built once
    band = layer.attended(window=4)[0, 0]
    i, j = torch.arange(n)[:, None], torch.arange(n)[None, :]
    assert torch.equal(band, (i - j >= 0) & (i - j < 4))


def test_padded_mask_is_the_models_own_and_sees_its_padding():
    n = 9
    padding = torch.ones(2, n, dtype=torch.long)
    padding[1, :3] = 0
    layer = _mask(padding, n)
    assert layer.mask is not None and layer.mask.dtype == torch.bool
    assert not layer.sees_every_key()
    eager = eager_mask(batch_size=2, q_length=n, kv_length=n, attention_mask=padding.bool())
    assert torch.equal(layer.additive(2, 8, torch.float32), eager[:, :, 2:8])
    assert torch.equal(layer.attended(), eager == 0)
    additive = LayerMask(eager, 2, n, n, causal=True, device=torch.device("cpu"))
    assert torch.equal(additive.attended(), eager == 0)  # a float mask passed as it is
    assert additive.additive(0, 4, torch.float32) is not None


def test_unbuilt_full_attention_adds_nothing():
    layer = LayerMask(None, 1, 5, 5, causal=False, device=torch.device("cpu"))
    assert layer.additive(0, 5, torch.float32) is None
    assert layer.attended().all()
