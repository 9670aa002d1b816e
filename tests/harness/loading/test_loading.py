"""The one model loader (posgen.harness.loading): entries, devices, dtypes, twins, rope
settings and PEFT adapters, on tiny local models."""

from __future__ import annotations

import argparse

import pytest
import torch

from posgen.harness.loading import (
    LoadError,
    LoadOptions,
    add_loading_arguments,
    check_device,
    hflm_kwargs,
    load_model,
    model_entries,
    require_rope,
)
from posgen.perturbations.length import LengthYarn
from tiny_models import save_tiny_adapter


def _args(*argv: str) -> LoadOptions:
    parser = argparse.ArgumentParser()
    add_loading_arguments(parser)
    return LoadOptions.from_args(parser.parse_args(list(argv)))


@pytest.fixture(scope="module")
def adapter(tiny_model_dir, tmp_path_factory):
    return save_tiny_adapter(tiny_model_dir("llama", 0), tmp_path_factory.mktemp("lora"))


def test_the_entry_carries_every_loading_flag(tiny_model_dir, adapter):
    path = str(tiny_model_dir("llama", 0))
    args = _args("--dtype", "bfloat16", "--attn-implementation", "eager", "--peft", str(adapter))
    (entry,) = model_entries([path], args)
    assert (entry.dtype, entry.attn_implementation, entry.peft) == (
        "bfloat16",
        "eager",
        str(adapter),
    )
    kwargs = hflm_kwargs(entry, "cpu")
    assert kwargs["dtype"] == "bfloat16" and kwargs["peft"] == str(adapter)
    assert kwargs["attn_implementation"] == "eager" and kwargs["device"] == "cpu"


def test_load_model_applies_dtype_attention_and_records_them(tiny_model_dir):
    (entry,) = model_entries(
        [str(tiny_model_dir("llama", 0))],
        _args("--dtype", "bfloat16", "--attn-implementation", "eager"),
    )
    loaded = load_model(entry, "cpu")
    assert next(loaded.model.parameters()).dtype == torch.bfloat16
    assert loaded.model.config._attn_implementation == "eager"
    assert loaded.record == {**entry.to_dict(), "device": "cpu"}


def test_a_rope_scaling_is_set_at_load_and_recorded(tiny_model_dir):
    (entry,) = model_entries([str(tiny_model_dir("llama", 0))], _args())
    loaded = load_model(entry, "cpu", length=LengthYarn(2.0))
    assert loaded.model.model.rotary_emb.rope_type == "yarn"
    assert loaded.record["rope"]["max_position_embeddings"] == 2 * 2048
    assert loaded.record["rope"]["rope_parameters"]["rope_type"] == "yarn"


def test_the_random_init_twin_is_seeded_and_cast_to_the_entry_dtype(tiny_model_dir):
    path = str(tiny_model_dir("llama", 0))
    trained, twin = model_entries([path], _args("--dtype", "bfloat16"), random_init=True, seed=3)
    a, b = (load_model(twin, "cpu", seed=3).model for _ in range(2))
    c = load_model(twin, "cpu", seed=4).model
    weights = [m.model.layers[0].self_attn.q_proj.weight for m in (a, b, c)]
    assert torch.equal(weights[0], weights[1]) and not torch.equal(weights[0], weights[2])
    assert weights[0].dtype == torch.bfloat16
    trained_w = load_model(trained, "cpu").model.model.layers[0].self_attn.q_proj.weight
    assert not torch.equal(trained_w, weights[0])


def test_a_peft_adapter_is_active_and_equals_the_peft_forward(tiny_model_dir, adapter):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    path = tiny_model_dir("llama", 0)
    (base_entry,) = model_entries([str(path)], _args())
    (entry,) = model_entries([str(path)], _args("--peft", str(adapter)))
    ids = torch.randint(3, 384, (1, 40), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        plain = load_model(base_entry, "cpu").model(ids).logits
        got = load_model(entry, "cpu").model(ids).logits
        reference = (
            PeftModel.from_pretrained(
                AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32), adapter
            )
            .eval()(ids)
            .logits
        )
    assert not torch.allclose(got, plain, atol=1e-3)
    torch.testing.assert_close(got, reference, rtol=0, atol=0)


@pytest.mark.parametrize("text", ["bogus", "cuda:x", "gpu", "cpu:0:1"])
def test_a_malformed_device_is_refused(text):
    with pytest.raises(LoadError, match="give cpu, cuda"):
        check_device(text)


@pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")
def test_cuda_without_cuda_is_refused():
    with pytest.raises(LoadError, match="no CUDA device is available"):
        check_device("cuda")
    assert check_device("cpu") == "cpu" and check_device(None) is None


def test_a_model_without_rope_is_refused(tiny_model_dir):
    (entry,) = model_entries([str(tiny_model_dir("gpt2", 0))], _args())
    with pytest.raises(LoadError, match="no rotary position embedding"):
        require_rope(entry, "posgen length")
