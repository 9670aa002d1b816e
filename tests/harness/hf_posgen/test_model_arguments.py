"""hf-posgen's own model arguments, checked before any weights load (no model)."""

from __future__ import annotations

import pytest

from posgen.harness.hf_posgen.model_arguments import checked_arguments
from posgen.perturbations import PerturbationError


def _checked(**given):
    arguments = dict.fromkeys(("positions", "features", "length", "layers", "heads", "logits"))
    return checked_arguments(**{**arguments, "perturb_seed": 1, **given})


def test_the_perturbation_and_the_length_scheme_are_parsed():
    p, length = _checked(positions="swap:0.1", layers="1", length=None)
    assert p.positions.to_string() == "swap:0.1" and p.layers == (1,) and p.seed == 1
    assert length is None
    p, length = _checked(length="scale:2")
    assert not p.is_set and length.to_string() == "scale:2.0"


@pytest.mark.parametrize(
    ("given", "refusal"),
    [
        ({"logits": ""}, "logits= is empty"),
        ({"positions": "swap:0.1", "layers": "1", "length": "scale:2"}, "drop length="),
        ({"logits": "foreign"}, "logits=foreign takes its distance term"),
        ({"logits": "additive", "length": "lambda:2:8"}, "both replace"),
    ],
)
def test_arguments_that_exclude_each_other_are_refused(given, refusal):
    with pytest.raises(PerturbationError, match=refusal):
        _checked(**given)


@pytest.mark.parametrize(
    ("model_args", "refusal"),
    [
        (
            "length=infllm:topk=2,n_local=64",
            "length=infllm:topk=2,n_local=64: lm-eval splits --model_args at every comma, so "
            "n_local=64 arrived as a model argument of its own; inside --model_args separate "
            "a length scheme's values with ':' (length=infllm:topk=2:n_local=64)",
        ),
        (
            "length=lambda:4,8192,max_length=16384",
            "length=lambda:4,8192: lm-eval splits --model_args at every comma, so 8192 arrived "
            "as a model argument of its own; inside --model_args separate a length scheme's "
            "values with ':' (length=lambda:4:8192)",
        ),
        ("length=lambda:4,C", "so C arrived as a model argument of its own"),
    ],
)
def test_a_length_scheme_cut_at_its_commas_by_lm_eval_is_refused_in_one_line(
    monkeypatch, model_args, refusal
):
    """lm-eval splits ``--model_args`` at every comma: the comma forms of ``--schemes`` gave a
    TypeError from the model's constructor (infllm, after the weights loaded) or told the
    user to write the very comma that was cut (lambda). Refused before anything loads,
    naming the separator model arguments take."""
    from lm_eval.models.huggingface import HFLM

    from posgen.harness.hf_posgen.model import HFPosgenLM

    monkeypatch.setattr(HFLM, "__init__", lambda *a, **k: pytest.fail("weights loaded"))
    with pytest.raises(PerturbationError) as refused:  # as lm-eval builds the model
        HFPosgenLM.create_from_arg_string(f"pretrained=/nonexistent/model,{model_args}")
    assert refusal in str(refused.value) and "\n" not in str(refused.value)


def test_a_length_scheme_with_colons_takes_the_other_model_arguments():
    _, length = _checked(length="infllm:topk=2:n_local=64", others={"max_length": 128})
    assert length.to_string() == "infllm:n_local=64,topk=2"
    _checked(length="lambda:4:8", others={"max_length": 128, "batch_size": ""})  # hf's own


@pytest.mark.parametrize(
    ("seed", "why"),
    [
        ("-1.0", "-1.0 is negative and not written as an integer"),
        ("3.0", "3.0 is not written as an integer"),
        ("-1", "-1 is negative"),
        ("4294967296", "4294967296 is 2**32 or more"),
        ("abc", "'abc' is not a number"),
    ],
)
def test_a_bad_perturb_seed_says_what_is_accepted_and_what_is_wrong(monkeypatch, seed, why):
    """``perturb_seed=-1.0`` (lm-eval hands it over as the float -1.0) was refused as "must
    be an int, got -1.0"; negative seeds and seeds past what the seeding takes were
    accepted (the latter to fail at the first request)."""
    from lm_eval.models.huggingface import HFLM

    from posgen.harness.hf_posgen.model import HFPosgenLM

    monkeypatch.setattr(HFLM, "__init__", lambda *a, **k: pytest.fail("weights loaded"))
    with pytest.raises(PerturbationError) as refused:
        HFPosgenLM.create_from_arg_string(f"pretrained=/nonexistent/model,perturb_seed={seed}")
    assert str(refused.value) == (
        "perturb_seed must be an integer in [0, 2**32) written in digits (e.g. "
        f"perturb_seed=7); {why}"
    )


def test_a_seed_in_range_is_taken_as_an_integer():
    assert _checked(perturb_seed="7", positions="swap:0.1")[0].seed == 7
    assert _checked(perturb_seed=2**32 - 1, positions="swap:0.1")[0].seed == 2**32 - 1
