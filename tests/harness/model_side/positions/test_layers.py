"""``layers=``: schemes in chosen decoder layers only (tiny models, every RoPE family)."""

from __future__ import annotations

import contextlib
import dataclasses

import pytest
import torch
from transformers import AutoConfig, AutoModelForCausalLM

from posgen.harness.model_side.attention.qk_noise import qk_noise_active
from posgen.harness.model_side.positions.layers import layer_count, layer_positions
from posgen.harness.model_side.positions.plan import build_plan
from posgen.harness.model_side.positions.rotary import rotary_positions
from posgen.harness.model_side.positions.selection import check_layers, format_layers, parse_layers
from posgen.perturbations import PerturbationError, parse
from tiny_models import CONFIGS, ROPE_ARCHS

LAYERS = 4
IDS = torch.tensor(
    [[5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16], [5, 6, 7, 9, 8, 10, 3, 4, 0, 0, 0, 0]]
)
LENGTHS = [12, 8]


def four_layer(arch: str) -> torch.nn.Module:
    cfg = dict(CONFIGS[arch], num_hidden_layers=LAYERS)
    if "layer_types" in cfg:
        cfg["layer_types"] = ["sliding_attention", "full_attention"] * (LAYERS // 2)
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(AutoConfig.for_model(arch, **cfg), dtype=torch.float32)
    return model.eval()


@pytest.fixture(scope="module", params=ROPE_ARCHS)
def model(request):
    return four_layer(request.param)


def hidden(model, **kwargs) -> tuple[torch.Tensor, ...]:
    with torch.no_grad():
        out = model(IDS, output_hidden_states=True, **kwargs)
    return (*out.hidden_states, out.logits)


def swap_plan():
    return build_plan(IDS, LENGTHS, [parse("position", "shuffle")], 3)


@pytest.mark.parametrize("first", [1, 2])
def test_layers_before_the_first_chosen_one_are_plain_hf_bit_for_bit(model, first):
    plain = hidden(model)
    with layer_positions(model, swap_plan().positions, (first, LAYERS - 1)):
        moved = hidden(model)
    # hidden_states[i] is the input of layer i: equal through the first chosen layer's input
    for i in range(first + 1):
        assert torch.equal(moved[i], plain[i]), i
    assert not torch.allclose(moved[first + 1], plain[first + 1])  # the chosen layer acts
    assert layer_count(model) == LAYERS


def test_every_layer_chosen_is_the_global_perturbation_exactly(model):
    positions = swap_plan().positions
    with rotary_positions(model, positions):
        everywhere = hidden(model)
    with layer_positions(model, positions, tuple(range(LAYERS))):
        chosen = hidden(model)
    assert all(torch.equal(a, b) for a, b in zip(everywhere, chosen, strict=True))
    assert not torch.allclose(everywhere[-1], hidden(model)[-1])  # hooks are removed


def test_qk_noise_is_gated_by_layer(model):
    plan = build_plan(IDS, LENGTHS, [parse("feature", "qk_noise:0.5")], 3)
    with qk_noise_active(model, plan):
        everywhere = hidden(model)
    with qk_noise_active(model, dataclasses.replace(plan, layers=tuple(range(LAYERS)))):
        assert all(torch.equal(a, b) for a, b in zip(everywhere, hidden(model), strict=True))
    plain = hidden(model)
    with qk_noise_active(model, dataclasses.replace(plan, layers=(2,))):
        moved = hidden(model)
    assert all(torch.equal(moved[i], plain[i]) for i in range(3))
    assert not torch.allclose(moved[3], plain[3])


def test_layers_past_the_last_are_refused(model):
    with (
        pytest.raises(PerturbationError, match="has 4 layers"),
        layer_positions(model, swap_plan().positions, (4,)),
    ):
        pass


@pytest.mark.parametrize(
    ("text", "expected"),
    [("12", (12,)), ("0-3", (0, 1, 2, 3)), ("3;7;11", (3, 7, 11)), ("5;0-2;5", (0, 1, 2, 5))],
)
def test_layer_specs_parse_and_print_back(text, expected):
    assert parse_layers(text) == expected
    assert parse_layers(format_layers(expected)) == expected


def test_no_spec_means_every_layer():
    assert parse_layers(None) is None and parse_layers("") is None and parse_layers("all") is None
    assert parse_layers(4) == (4,)


@pytest.mark.parametrize("bad", ["a", "1-", "-2", "5-2", "1,2", "1.5", "3;;4"])
def test_bad_layer_specs_name_the_accepted_forms(bad):
    with pytest.raises(PerturbationError, match="layers=") as e:
        parse_layers(bad)
    assert "0-5" in str(e.value) or "backwards" in str(e.value)


def test_check_layers_names_the_range():
    check_layers((0, 29), 30)
    with pytest.raises(PerturbationError, match=r"30 layers \(0-29\)"):
        check_layers((30,), 30)


# ---------------------------------------------------------------- through hf-posgen
TEXTS = ["The quick brown fox jumps over the lazy dog. " * 3, "A short text about lists."]


def rolling(lm) -> list[float]:
    from lm_eval.api.instance import Instance

    reqs = [Instance("loglikelihood_rolling", None, (t,), i) for i, t in enumerate(TEXTS)]
    return lm.loglikelihood_rolling(reqs, disable_tqdm=True)


@pytest.fixture(scope="module")
def lm(tiny_model_dir):
    from posgen.harness.hf_posgen.model import HFPosgenLM

    return HFPosgenLM.create_from_arg_string(
        f"pretrained={tiny_model_dir('llama')},positions=swap:0.3,layers=0;1",
        {"device": "cpu", "batch_size": 2},
    )


def test_model_args_take_layers_and_every_layer_equals_the_global_run(lm):
    assert lm.perturbation.layers == (0, 1)
    assert lm.get_model_info()["posgen"]["layers"] == "0-1"
    chosen = rolling(lm)
    lm.set_perturbation("swap:0.3")
    assert rolling(lm) == chosen
    lm.set_perturbation("swap:0.3", layers="1")
    one = rolling(lm)
    lm.set_perturbation()
    plain = rolling(lm)
    assert one != chosen and one != plain


def test_the_cache_namespace_follows_the_layers():
    from posgen.harness.model_side.perturbation import ModelPerturbation

    a = ModelPerturbation.parse("swap:0.3", None, 1)
    b = ModelPerturbation.parse("swap:0.3", None, 1, "1")
    assert a.cache_namespace() != b.cache_namespace()
    assert "layers" not in a.to_dict()  # records of runs without layers= are unchanged


def test_layers_out_of_range_are_refused_after_load_too(lm):
    lm.set_perturbation("swap:0.3", layers="0-1")
    with pytest.raises(PerturbationError, match="has 2 layers"):
        lm.set_perturbation("swap:0.3", layers="2")
    assert lm.perturbation.layers == (0, 1)  # unchanged by the refusal


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ("positions=swap:0.3,layers=7", "has 2 layers"),
        ("positions=swap:0.3,layers=x", "layers=x"),
        ("layers=1", "restricts positions=/features=/logits= to those layers"),
        ("positions=swap:0.3,layers=1,length=scale:2", "drop length="),
        ("positions=swap:0.3,layers=1,heads=4", "4 query heads"),
    ],
)
def test_bad_layers_are_refused_before_weights_load(tiny_model_dir, monkeypatch, args, match):
    from lm_eval.models.huggingface import HFLM

    from posgen.harness.hf_posgen.model import HFPosgenLM

    def no_load(*a, **k):
        raise AssertionError("weights loaded before the spec was checked")

    monkeypatch.setattr(HFLM, "__init__", no_load)
    with pytest.raises(PerturbationError, match=match):
        HFPosgenLM.create_from_arg_string(f"pretrained={tiny_model_dir('llama')},{args}", {})


# ---------------------------------------------------------------- heads= within a layer
def heads_run(model, plan, layers, heads, split=True):
    plan = dataclasses.replace(plan, layers=layers, heads=heads)
    with contextlib.ExitStack() as stack:
        if plan.positions is not None:
            stack.enter_context(layer_positions(model, plan.positions, layers, split))
        if plan.qk or split:
            stack.enter_context(qk_noise_active(model, plan))
        return hidden(model)


def head_outputs(model, layer: int, run) -> torch.Tensor:
    """The input of layer ``layer``'s output projection, ``[B, T, H * d]``."""
    attention = dict((m.layer_idx, m) for m in model.modules() if hasattr(m, "layer_idx"))[layer]
    proj = getattr(attention, "o_proj", None) or attention.dense
    seen = []
    handle = proj.register_forward_pre_hook(lambda m, a: seen.append(a[0].detach().clone()))
    try:
        run()
    finally:
        handle.remove()
    return seen[0]


@pytest.mark.parametrize("scheme", [("position", "shuffle"), ("feature", "qk_noise:0.5")])
def test_every_head_chosen_equals_the_layer_perturbation_exactly(model, scheme):
    plan = build_plan(IDS, LENGTHS, [parse(*scheme)], 3)
    heads = tuple(range(model.config.num_attention_heads))
    whole = heads_run(model, plan, (1, 2), None, split=False)
    mixed = heads_run(model, plan, (1, 2), heads)
    assert all(torch.equal(a, b) for a, b in zip(whole, mixed, strict=True))


@pytest.mark.parametrize("scheme", [("position", "shuffle"), ("feature", "qk_noise:0.5")])
def test_heads_outside_the_choice_attend_as_plain_hf(model, scheme):
    plan = build_plan(IDS, LENGTHS, [parse(*scheme)], 3)
    plain = head_outputs(model, 1, lambda: hidden(model))
    mixed = head_outputs(model, 1, lambda: heads_run(model, plan, (1,), (1,)))
    d = plain.shape[-1] // model.config.num_attention_heads
    for h in range(model.config.num_attention_heads):
        same = torch.equal(mixed[..., h * d : (h + 1) * d], plain[..., h * d : (h + 1) * d])
        assert same == (h != 1), h


def test_heads_need_layers_and_must_exist(tiny_model_dir):
    from posgen.harness.model_side.perturbation import ModelPerturbation

    with pytest.raises(PerturbationError, match="give layers= too"):
        ModelPerturbation.parse("swap:0.3", None, 1, None, "0")
    with pytest.raises(PerturbationError, match="heads=x"):
        ModelPerturbation.parse("swap:0.3", None, 1, "0", "x")
    assert ModelPerturbation.parse("swap:0.3", None, 1, "0", "1;3").to_dict()["heads"] == "1;3"


def test_model_args_take_heads(lm):
    lm.set_perturbation("swap:0.3", layers="1")
    layer = rolling(lm)
    lm.set_perturbation("swap:0.3", layers="1", heads="0-3")  # every head of the tiny model
    assert rolling(lm) == layer
    lm.set_perturbation("swap:0.3", layers="1", heads="2")
    assert rolling(lm) != layer
    assert lm.get_model_info()["posgen"]["heads"] == "2"
