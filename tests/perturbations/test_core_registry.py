"""The perturbation registry and specs (unit tier)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import pytest

from posgen.perturbations import PerturbationError, PerturbationSpec, parse, registry
from posgen.perturbations.base import Registry
from posgen.perturbations.text import TextPerturbation, WordSwap


def test_unknown_names_fail_with_close_matches() -> None:
    with pytest.raises(PerturbationError, match=r"Did you mean 'swap'\?") as err:
        registry.get("text", "swapp")
    assert "local_shuffle:WINDOW" in str(err.value)  # lists what is accepted
    with pytest.raises(PerturbationError, match="Did you mean 'local_shuffle'"):
        parse("text", "local_shufle:3")
    with pytest.raises(PerturbationError, match="unknown perturbation kind 'txt'"):
        registry.get("txt", "swap")


def test_a_duplicate_name_is_refused() -> None:
    reg = Registry()

    @dataclass(frozen=True)
    class First(TextPerturbation):
        name: ClassVar[str] = "dup"

    @dataclass(frozen=True)
    class Second(TextPerturbation):
        name: ClassVar[str] = "dup"

    reg.register(First)
    reg.register(First)  # the same class again is harmless
    with pytest.raises(PerturbationError, match="already registered by"):
        reg.register(Second)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("swap:0.05", WordSwap(0.05)), (" swap : 0.5 ", WordSwap(0.5))],
)
def test_short_forms_parse(text: str, expected) -> None:
    assert parse("text", text) == expected


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("swap:abc", "is not a number"),
        ("shuffle:3", "takes no value"),
        ("swap:2", "rate must be a number in"),
        ("local_shuffle:1", "window must be"),
    ],
)
def test_bad_short_forms_say_what_to_write(text: str, message: str) -> None:
    with pytest.raises(PerturbationError, match=message):
        parse("text", text)


@pytest.mark.parametrize(
    ("kind", "text", "message"),
    [
        ("position", "shift:1e30", "OFFSET takes an integer written in digits, got '1e30'"),
        ("text", "local_shuffle:2.0", "WINDOW takes an integer written in digits, got '2.0'"),
        ("position", "shift:inf", "OFFSET takes a finite integer, got 'inf'"),
        ("position", "shift:" + "9" * 20, "OFFSET takes an integer below 2**63 (a 64-bit"),
        ("position", "local_shuffle:" + "9" * 20, "WINDOW takes an integer below 2**63"),
    ],
)
def test_an_integer_parameter_says_what_is_wrong_with_a_number(kind, text, message) -> None:
    """``shift:1e30`` was refused as "'1e30' is not a number" (it is one), and digits past
    what a 64-bit integer holds were taken, to fail later with an OverflowError: the
    refusal says what the parameter takes."""
    with pytest.raises(PerturbationError) as refused:
        parse(kind, text)
    assert message in str(refused.value) and "is not a number" not in str(refused.value)


def test_spec_round_trips_and_refuses_other_versions() -> None:
    p = parse("text", "adjacent:0.2")
    spec = p.spec
    assert spec.to_dict() == {
        "kind": "text",
        "name": "adjacent",
        "version": 2,
        "params": {"rate": 0.2},
    }
    assert registry.from_spec(spec.to_dict()) == p
    assert PerturbationSpec.from_dict(spec.to_dict()).to_string() == "adjacent:0.2"
    assert spec.to_json() == '{"kind":"text","name":"adjacent","params":{"rate":0.2},"version":2}'
    with pytest.raises(PerturbationError, match="version 9 was recorded"):
        registry.from_spec({**spec.to_dict(), "version": 9})
    with pytest.raises(PerturbationError, match="has no parameter"):
        registry.from_spec({**spec.to_dict(), "params": {"ratio": 0.2}})


def test_the_rate_does_not_change_the_random_stream() -> None:
    assert WordSwap(0.1).stream_name() == WordSwap(0.9).stream_name()
    assert (
        parse("text", "local_shuffle:3").stream_name()
        != parse("text", "local_shuffle:4").stream_name()
    )


@pytest.mark.parametrize(
    ("kind", "text", "form"),
    [
        ("position", "swap", "swap:RATE"),
        ("position", "shift:", "shift:OFFSET"),
        ("position", "scale:", "scale:FACTOR"),
        ("position", "shift", "shift:OFFSET"),
        ("text", "adjacent", "adjacent:RATE"),
        ("feature", "rope_noise:", "rope_noise:SIGMA"),
    ],
)
def test_a_scheme_with_a_parameter_needs_its_value(kind, text, form) -> None:
    """No silent default: ``positions=swap`` is an error, not swap at some rate."""
    with pytest.raises(PerturbationError) as info:
        registry.parse(kind, text)
    message = str(info.value)
    assert f"write {form}" in message
    assert message.lower().count("accepted") == 1 and message.count(form) == 2


def test_hf_posgen_names_the_accepted_forms_once() -> None:
    pytest.importorskip("torch")
    from posgen.harness.model_side.perturbation import parse_spec

    for value in ("swap", "swop:0.1", "shuffle:3"):
        with pytest.raises(PerturbationError) as info:
            parse_spec("position", value)
        assert str(info.value).startswith(f"positions={value}: ")
        assert str(info.value).lower().count("accepted") == 1
