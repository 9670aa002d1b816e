"""The capture of attention logits checked against the model's own attention, for the tests
of the capture and of the decomposition of each family."""

from __future__ import annotations

import torch

from posgen.harness.model_side.logits.capture import capture_attention


def check_probabilities(model, ids: torch.Tensor, atol: float = 1e-6) -> dict[int, tuple]:
    """Capture, compare with output_attentions under eager; returns layer -> (shape, attended)."""
    model.set_attn_implementation("eager")
    seen: dict[int, tuple] = {}

    def consumer(cap) -> None:
        assert cap.logits.dtype == torch.float32
        probs = torch.softmax(cap.logits.masked_fill(~cap.attended, float("-inf")), dim=-1)
        seen[cap.layer] = (tuple(cap.logits.shape), cap.attended[0, 0].clone(), probs.clone())

    with torch.no_grad():
        ref = model(ids, use_cache=False, output_attentions=True)
        with capture_attention(model, consumer):
            out = model(ids, use_cache=False)
    assert model.config._attn_implementation == "eager"  # restored
    torch.testing.assert_close(out.logits, ref.logits, rtol=0, atol=1e-6)
    assert sorted(seen) == list(range(model.config.num_hidden_layers))
    for layer, (_, _, probs) in seen.items():
        torch.testing.assert_close(probs, ref.attentions[layer].float(), rtol=0, atol=atol)
    return seen
