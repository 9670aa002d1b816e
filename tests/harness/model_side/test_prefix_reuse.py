"""Prefix reuse (``posgen layers``): layers below the first perturbed one replay the plain
forward's outputs, and a cell scores bit for bit what the whole stack scores."""

from __future__ import annotations

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from posgen.harness.model_side.prefix_reuse import PrefixReuse, decoder_layers
from tiny_models import CONFIGS, ROPE_ARCHS

TEXTS = [
    "The quick brown fox jumps over the lazy dog. " * 3,
    "A short text about lists and their order.",
    "Positions of words matter to a model, and so does their order in a text. " * 2,
]
IDS = torch.tensor([[5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16]])


def four_layer(arch: str) -> torch.nn.Module:
    cfg = dict(CONFIGS[arch], num_hidden_layers=4)
    if "layer_types" in cfg:
        cfg["layer_types"] = ["sliding_attention", "full_attention"] * 2
    torch.manual_seed(0)
    return AutoModelForCausalLM.from_config(AutoConfig.for_model(arch, **cfg)).eval()


@pytest.mark.parametrize("arch", ROPE_ARCHS)
def test_replayed_layers_reproduce_the_plain_logits_bit_for_bit(arch):
    model = four_layer(arch)
    layers = decoder_layers(model)
    assert len(layers) == 4 and all(f".{i}" in n for i, n in enumerate(_names(model, layers)))
    reuse = PrefixReuse(model)
    with torch.no_grad():
        with reuse.record(IDS):
            plain = model(IDS).logits
        for first in (1, 3):
            with reuse.replay(IDS, first) as reused:
                assert reused
                assert torch.equal(model(IDS).logits, plain)
    assert reuse.reused_layers == 4
    # the layers compute again after the block (no forward left patched)
    assert all("forward" not in layer.__dict__ for layer in layers)


def test_a_replay_that_skips_nothing_or_misses_changes_nothing():
    model = four_layer("llama")
    reuse = PrefixReuse(model)
    with reuse.replay(IDS, 2) as reused:  # never recorded
        assert not reused
    with torch.no_grad(), reuse.record(IDS):
        model(IDS)
    with reuse.replay(IDS, 0) as reused:
        assert not reused
    with reuse.replay(IDS[:, :-1], 2) as reused:  # another batch
        assert not reused


def test_the_check_turns_reuse_off_when_the_replay_differs():
    model = four_layer("llama")
    reuse = PrefixReuse(model)
    with torch.no_grad():
        with reuse.record(IDS):
            plain = model(IDS).logits
        assert reuse.check(IDS, plain, lambda: model(IDS).logits)
        assert reuse.enabled and reuse.note.startswith("on")
        wrong = PrefixReuse(model)
        with wrong.record(IDS):
            model(IDS)
        key = next(iter(wrong._outputs))
        wrong._outputs[key] = [o + 1 for o in wrong._outputs[key]]  # a stale record
        assert not wrong.check(IDS, plain, lambda: model(IDS).logits)
    assert wrong.note.startswith("off") and not wrong.enabled and len(wrong) == 0
    with wrong.replay(IDS, 2) as reused:
        assert not reused


def test_an_instance_forward_is_put_back():
    model = four_layer("llama")
    layer = decoder_layers(model)[0]
    own = layer.forward
    layer.forward = own  # as accelerate's device hooks set one on the instance
    reuse = PrefixReuse(model)
    with torch.no_grad(), reuse.record(IDS):
        model(IDS)
    with reuse.replay(IDS, 1):
        assert layer.forward is not own
    assert layer.__dict__["forward"] is own


def rolling(lm) -> list[float]:
    from lm_eval.api.instance import Instance

    reqs = [Instance("loglikelihood_rolling", None, (t,), i) for i, t in enumerate(TEXTS)]
    return lm.loglikelihood_rolling(reqs, disable_tqdm=True)


@pytest.mark.parametrize("arch", ["llama", "gemma2"])
def test_hf_posgen_cells_score_the_same_with_and_without_reuse(tiny_model_dir, arch):
    from posgen.harness.hf_posgen.model import HFPosgenLM

    lm = HFPosgenLM(pretrained=str(tiny_model_dir(arch)), device="cpu", batch_size=2)
    lm.set_perturbation("swap:0.3", None, 5, layers="1", heads=None)
    whole = {"1": rolling(lm)}
    lm.set_perturbation("swap:0.3", None, 5, layers="1", heads="0")
    whole["1/0"] = rolling(lm)
    lm.set_perturbation(None, None, 5)
    plain = rolling(lm)

    lm.prefix_reuse = PrefixReuse(lm.model)
    assert rolling(lm) == plain  # the recording pass scores as before
    assert lm.prefix_reuse.checked and lm.prefix_reuse.enabled and len(lm.prefix_reuse) == 2
    lm.set_perturbation("swap:0.3", None, 5, layers="1")
    assert rolling(lm) == whole["1"] != plain
    lm.set_perturbation("swap:0.3", None, 5, layers="1", heads="0")
    assert rolling(lm) == whole["1/0"]
    assert lm.prefix_reuse.reused_layers == 4  # 2 batches × 2 cells × 1 layer


def _names(model, layers):
    names = {id(m): n for n, m in model.named_modules()}
    return [names[id(m)] for m in layers]
