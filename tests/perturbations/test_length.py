"""Length schemes: strict parsing, specs, and the rope_parameters they load with."""

from __future__ import annotations

import pytest
from tests.tiny_models import CONFIGS
from transformers import AutoConfig, AutoModelForCausalLM

from posgen.perturbations import registry
from posgen.perturbations.base import PerturbationError
from posgen.perturbations.length import (
    LengthDynamic,
    LengthLambda,
    LengthNone,
    LengthScale,
    LengthYarn,
    check_length_list,
    parse_length,
    parse_length_list,
)


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("none", LengthNone()),
        ("lambda:4,2048", LengthLambda(4, 2048)),
        (" lambda: 0 , 16 ", LengthLambda(0, 16)),
        ("lambda:4:64", LengthLambda(4, 64)),
        ("scale:2", LengthScale(2.0)),
        ("dynamic:2.5", LengthDynamic(2.5)),
        ("yarn:4", LengthYarn(4.0)),
    ],
)
def test_parse_and_round_trip(text, expected):
    scheme = parse_length(text)
    assert scheme == expected
    assert parse_length(scheme.to_string()) == scheme
    assert registry.from_spec(scheme.spec.to_dict()) == scheme


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("none:1", "takes no value"),
        ("lambda", "GLOBAL,WINDOW"),
        ("lambda:4", "GLOBAL,WINDOW"),
        ("lambda:4,5,6", "GLOBAL,WINDOW"),
        ("lambda:4:5:6", "GLOBAL,WINDOW"),
        ("lambda:x,5", "not an integer"),
        ("lambda:4,0", "window must be"),
        ("lambda:-1,8", "n_global must be"),
        ("scale", "needs a value"),
        ("yarn:", "needs a value"),
        ("scale:0.5", ">= 1"),
        ("dynamic:nan", ">= 1"),
        ("yarn:abc", "not a number"),
        ("ntk:2", "Accepted"),
    ],
)
def test_strict_errors(text, match):
    with pytest.raises(PerturbationError, match=match):
        parse_length(text)


def test_list_uses_semicolons():
    assert parse_length_list("none; lambda:4,16 ;scale:2") == [
        LengthNone(),
        LengthLambda(4, 16),
        LengthScale(2.0),
    ]
    with pytest.raises(PerturbationError):
        parse_length_list(" ; ")


@pytest.mark.parametrize("context", [None, 8192])
@pytest.mark.parametrize(
    ("text", "typed"),
    [
        ("lambda:4,C,7", "'lambda:4,C,7'"),
        ("none;lambda:C", "'lambda:C'"),
        ("scale:C.5x", "'scale:C.5x'"),
        ("infllm:n_local=C,topk=x", "'infllm:n_local=C,topk=x'"),
    ],
)
def test_errors_quote_a_scheme_as_written_with_c(text, typed, context):
    """``--schemes "lambda:4,C,7"`` was refused quoting 'lambda:4,2,7' (C replaced by the
    stand-in of the syntax check, or by the trained context): the scheme as typed."""
    with pytest.raises(PerturbationError) as refused:
        if context is None:
            check_length_list(text)  # the syntax check, before C is known
        else:
            parse_length_list(text, context)
    assert typed in str(refused.value), str(refused.value)


def test_mechanisms():
    assert LengthNone().is_identity and not LengthLambda().is_identity
    assert LengthScale(4.0).position_factor == 0.25 and LengthScale(1).is_identity
    assert LengthLambda().uses_attention and not LengthYarn().uses_attention
    assert LengthNone().load_kwargs(None) == {} and LengthScale(2).load_kwargs(None) == {}


def _config(**overrides):
    return AutoConfig.for_model("llama", **dict(CONFIGS["llama"], **overrides))


def test_rope_parameters_build_the_model_transformers_describes():
    cfg = _config(max_position_embeddings=64)
    yarn = LengthYarn(2.0).load_kwargs(cfg)
    assert yarn == {
        "rope_parameters": {
            "rope_type": "yarn",
            "factor": 2.0,
            "rope_theta": 10000.0,
            "original_max_position_embeddings": 64,
        },
        "max_position_embeddings": 128,
    }
    dyn = LengthDynamic(3.0).load_kwargs(cfg)
    assert dyn == {
        "rope_parameters": {"rope_type": "dynamic", "factor": 3.0, "rope_theta": 10000.0}
    }
    for kwargs, scaling in ((yarn, "yarn"), (dyn, "dynamic")):
        built = AutoModelForCausalLM.from_config(_config(**{**CONFIGS["llama"], **kwargs}))
        assert built.model.rotary_emb.rope_type == scaling


def test_stacked_rope_scaling_is_refused():
    cfg = _config(rope_parameters={"rope_type": "linear", "factor": 2.0, "rope_theta": 1e4})
    with pytest.raises(PerturbationError, match="does not stack"):
        LengthYarn(2.0).load_kwargs(cfg)
