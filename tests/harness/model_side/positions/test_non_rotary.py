"""hf-posgen on the non-rotary position families (learned absolute, ALiBi, none), on tiny
random-init models built from transformers configs (CPU, seconds)."""

from __future__ import annotations

import pytest
import torch
from lm_eval.models.huggingface import HFLM

from generation_requests import PROMPTS, generate, greedy_rows
from posgen.harness.hf_posgen.model import HFPosgenLM
from posgen.harness.model_side.family import family_of
from posgen.harness.model_side.positions.non_rotary import (
    alibi_positions,
    family_positions,
    interpolated_lookup,
)
from posgen.perturbations import PerturbationError
from scoring_requests import TEXTS, pairs, rolling
from tiny_models import build_model

pytestmark = pytest.mark.heavy

MOVABLE = ("gpt2", "opt", "bloom", "mpt", "falcon_alibi")
ALIBI = ("bloom", "mpt", "falcon_alibi")


@pytest.fixture(scope="module", params=MOVABLE)
def arch(request) -> str:
    return request.param


@pytest.fixture(scope="module")
def folder(tiny_model_dir, arch) -> str:
    return str(tiny_model_dir(arch))


@pytest.fixture(scope="module")
def lm(folder) -> HFPosgenLM:
    return HFPosgenLM(pretrained=folder, device="cpu", batch_size=4)


@pytest.fixture
def spec(lm):
    yield lambda *s: lm.set_perturbation(*s[:2], 5, *s[2:])
    lm.set_perturbation()


def test_identity_is_bit_identical_to_hf_and_a_swap_is_not(folder, lm, spec):
    hf = HFLM(pretrained=folder, device="cpu", batch_size=4)
    expected, expected_pairs, expected_gen = rolling(hf), pairs(hf), generate(hf)
    for identity in (("swap:0", None), ("shift:0", None), (None, "rope_noise:0")):
        spec(*identity)
        assert rolling(lm) == expected and pairs(lm) == expected_pairs, identity
        assert generate(lm) == expected_gen, identity
    spec("swap:0.3", None)  # random init: the log-likelihood moves, in no set direction
    assert rolling(lm) != expected
    spec(None, "rope_noise:1")
    assert rolling(lm) != expected


@pytest.mark.parametrize("positions", ["swap:0.3", "shift:4"])
def test_absolute_positions_are_the_ids_the_model_would_take(positions):
    """GPT-2 and OPT take ``position_ids``: the hook gives exactly the model's own forward
    with the planned ids passed in."""
    for name in ("gpt2", "opt"):
        model = build_model(name)
        ids = torch.randint(3, 384, (2, 24))
        plan = torch.stack([torch.randperm(24), torch.arange(24) + 3])
        with torch.no_grad(), family_positions(model, plan):
            hooked = model(ids).logits
        own = model(ids, position_ids=plan).logits
        assert torch.equal(hooked, own), name
        assert not torch.allclose(own, model(ids).logits)


def test_a_fractional_position_reads_between_table_rows():
    table = torch.nn.Embedding(6, 3)
    look = table.forward
    out = interpolated_lookup(look, torch.tensor([[2.25, 0.0, -0.5, 7.0]]), 6)
    w = table.weight.detach()
    expected = torch.stack([0.75 * w[2] + 0.25 * w[3], w[0], w[0], w[5]])
    torch.testing.assert_close(out[0].detach(), expected, rtol=0, atol=1e-6)
    with pytest.raises(PerturbationError, match=r"leave the model's learned position table"):
        interpolated_lookup(look, torch.tensor([[0, 6]]), 6)


@pytest.mark.parametrize("name", ALIBI)
def test_alibi_hook_is_exact_and_translation_blind(name):
    """An ALiBi model's own positions through the hook give its own logits bit for bit; a
    shift of every position adds a per-query constant that softmax ignores; a swap does
    not, in its row alone; every layer chosen is the global path; one layer chosen moves
    that layer's bias alone (the hidden states below it are bit for bit the model's)."""
    model = build_model(name)
    family = family_of(model)
    ids = torch.randint(3, 384, (2, 20))
    plain = model(ids).logits
    natural = torch.arange(20).expand(2, 20)
    with torch.no_grad(), family_positions(model, natural):
        assert torch.equal(model(ids).logits, plain)
    with torch.no_grad(), family_positions(model, natural + 7):
        torch.testing.assert_close(model(ids).logits, plain, rtol=0, atol=1e-5)
    swapped = torch.stack([torch.randperm(20), torch.arange(20)])
    with torch.no_grad(), family_positions(model, swapped):
        moved = model(ids).logits
    assert not torch.allclose(moved[0], plain[0]) and torch.equal(moved[1], plain[1])
    with torch.no_grad(), family_positions(model, swapped, layers=(0, 1)):
        assert torch.equal(model(ids).logits, moved)
    hidden: list[torch.Tensor] = []
    handle = family.blocks(model)[0].register_forward_hook(lambda m, a, o: hidden.append(o[0]))
    with torch.no_grad():
        model(ids)
        with alibi_positions(model, family, lambda natural, width: swapped, layers=(1,)):
            late = model(ids).logits
    handle.remove()
    assert torch.equal(hidden[0], hidden[1])  # layer 0 keeps the model's own bias
    assert not torch.allclose(late[0], plain[0]) and not torch.allclose(late[0], moved[0])


@pytest.mark.parametrize("s", [("swap:0.5", None), ("shift:3", "rope_noise:1")])
def test_generation_is_the_loglikelihood_greedy_decode(lm, spec, s):
    """Under a perturbation each generated token is the greedy one of the log-likelihood
    forward of context + generation (same draw; generated tokens at natural positions)."""
    spec(*s)
    contexts, generated = greedy_rows(lm, new_tokens=6)
    assert len(contexts) == len(PROMPTS)
    reqs = [(None, c, g) for c, g in zip(contexts, generated, strict=True)]
    assert all(greedy for _, greedy in lm._loglikelihood_tokens(reqs, disable_tqdm=True))


@pytest.mark.parametrize("name", ALIBI)
def test_alibi_takes_layers_and_heads(tiny_model_dir, name):
    lm = HFPosgenLM(pretrained=str(tiny_model_dir(name)), device="cpu", batch_size=4)
    everywhere = rolling(lm)
    lm.set_perturbation("swap:0.3", None, 5)
    swapped = rolling(lm)
    lm.set_perturbation("swap:0.3", None, 5, "0-1")
    assert rolling(lm) == swapped
    lm.set_perturbation("swap:0.3", None, 5, "1", "0;2")
    assert rolling(lm) not in (swapped, everywhere)


@pytest.mark.parametrize("name", ["bloom_qk", "mpt_qk", "falcon_alibi"])
def test_alibi_takes_logits_with_layers_and_heads(tiny_model_dir, name):
    """``logits=`` runs on BLOOM and MPT (the logits their own attention forms, replaced)
    and Falcon-ALiBi (its sdpa call's, through its mask): from the config check to the
    log-likelihood; generation under it is refused as on RoPE models."""
    path = str(tiny_model_dir(name))
    plain = rolling(HFPosgenLM(pretrained=path, device="cpu", batch_size=4))
    lm = HFPosgenLM(pretrained=path, device="cpu", batch_size=4, logits="additive")
    everywhere = rolling(lm)
    lm.set_perturbation(None, None, 0, "1", "2", "key")
    assert len({tuple(plain), tuple(everywhere), tuple(rolling(lm))}) == 3
    with pytest.raises(NotImplementedError, match="under logits=key"):
        generate(lm)


REFUSED = [
    ("gpt2", {"positions": "swap:0.1", "layers": "1"}, "positions enter once, before the first"),
    ("opt", {"features": "rope_noise:1", "layers": "0"}, "drop layers="),
    ("gpt2", {"features": "qk_noise:0.1"}, "use features=rope_noise"),
    ("mpt", {"features": "qk_noise:0.1"}, "use features=rope_noise"),
    ("bloom", {"features": "qk_noise:0.1"}, "has alibi positions: use features=rope_noise"),
    ("falcon_alibi", {"features": "qk_noise:0.1"}, "use features=rope_noise"),
    ("smollm3_nope", {"positions": "swap:0.1"}, "has no position encoding"),
    ("smollm3_nope", {"features": "rope_noise:1"}, "the causal mask is its only order signal"),
]


@pytest.mark.parametrize(("name", "kwargs", "message"), REFUSED)
def test_what_a_family_cannot_take_is_refused_in_one_line(
    tiny_model_dir, monkeypatch, name, kwargs, message
):
    monkeypatch.setattr(HFLM, "__init__", lambda *a, **k: pytest.fail("weights loaded"))
    with pytest.raises(PerturbationError, match=message) as refused:
        HFPosgenLM(pretrained=str(tiny_model_dir(name)), device="cpu", **kwargs)
    assert "\n" not in str(refused.value)


def test_a_model_without_positions_still_runs_text(tiny_model_dir):
    path = str(tiny_model_dir("smollm3_nope"))
    lm = HFPosgenLM(pretrained=path, device="cpu", batch_size=4)
    assert family_of(lm.model).kind == "none"
    assert rolling(lm, TEXTS[:3]) == rolling(HFLM(pretrained=path, device="cpu"), TEXTS[:3])
