"""The door: the one context that puts a model-side perturbation on a model, usable
outside hf-posgen's _model_call with a plan of its own."""

from __future__ import annotations

import pytest
import torch

from posgen.harness.hf_posgen.batch_rows import NO_DOCS, PaddedRows
from posgen.harness.hf_posgen.model import HFPosgenLM
from posgen.harness.model_side import door


@pytest.fixture(scope="module")
def lm(tiny_model_dir):
    return HFPosgenLM(pretrained=str(tiny_model_dir("llama")), device="cpu", batch_size=2)


@pytest.mark.parametrize(
    ("positions", "features", "layers"),
    [("swap:0.3", None, None), (None, "qk_noise:0.5", None), ("shift:5", "rope_noise:0.3", "1")],
)
def test_the_context_outside_model_call_gives_model_calls_logits(lm, positions, features, layers):
    inps = torch.randint(3, 300, (2, 24), generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        plain = lm.model(inps).logits
    p = lm.set_perturbation(positions, features, seed=5, layers=layers)
    try:
        with torch.no_grad():
            through_model_call = lm._model_call(inps)  # unpadded: every token is perturbed
            rows = PaddedRows([24, 24], [24, 24], [NO_DOCS, NO_DOCS], [None, None])
            with door.forward(lm.model, p, door.plan_forward(inps, p, rows)):
                inside = lm.model(inps).logits
            after = lm.model(inps).logits
    finally:
        lm.set_perturbation()
    assert torch.equal(inside, through_model_call)
    assert not torch.equal(inside, plain)
    assert torch.equal(after, plain)  # every hook and attention function taken off
