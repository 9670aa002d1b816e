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
