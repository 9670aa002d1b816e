"""The perturbed task name grammar (unit tier)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from posgen.perturbations import PerturbationError, parse
from posgen.tasks.lm_eval_tasks import perturbed_task_name, task_name_for
from posgen.tasks.naming import DEFAULT_SEED, parse_name, parse_rate_token, rate_token


@pytest.mark.parametrize(
    ("rate", "token"),
    [
        (0, "0pct"),
        (0.01, "1pct"),
        (0.05, "5pct"),
        (0.1, "10pct"),
        (0.5, "50pct"),
        (1.0, "100pct"),
        (0.005, "0p5pct"),
        (0.1225, "12p25pct"),
        (0.07, "7pct"),
    ],
)
def test_rate_tokens(rate: float, token: str) -> None:
    assert rate_token(rate) == token and parse_rate_token(token) == rate


@given(st.integers(0, 10_000))
def test_every_rate_in_basis_points_round_trips(bp: int) -> None:
    rate = bp / 10_000
    name = perturbed_task_name("swap", rate, "arc_easy")
    parsed = parse_name(name)
    assert parsed is not None and parsed.perturbation == parse("text", f"swap:{rate!r}")
    assert parsed.base_task == "arc_easy" and parsed.name == name


def test_names_of_every_scheme_with_seeds_and_groups() -> None:
    assert perturbed_task_name("swap", 0.05, "hellaswag") == "perm_swap_5pct_hellaswag"
    assert perturbed_task_name("swap", 0.05, "posgen") == "perm_swap_5pct"
    assert perturbed_task_name("adjacent", 0.2, "lambada_openai", seed=7) == (
        "perm_adjacent_20pct_seed7_lambada_openai"
    )
    assert task_name_for(parse("text", "local_shuffle:4"), "piqa") == "perm_local_shuffle_w4_piqa"
    assert task_name_for(parse("text", "shuffle"), None) == "perm_shuffle_all"
    p = parse_name("perm_local_shuffle_w4_seed0_arc_easy")
    assert p is not None and (p.perturbation.params, p.seed, p.base_task) == (
        {"window": 4},
        0,
        "arc_easy",
    )
    g = parse_name("perm_swap_5pct")
    assert g is not None and g.base_task is None and g.seed == DEFAULT_SEED
    assert parse_name("hellaswag") is None


def test_rate_and_seed_make_distinct_names() -> None:
    """lm-eval's request cache keys on the task name."""
    names = {
        perturbed_task_name("swap", r, "posgen_cloze", seed=s)
        for r in (0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
        for s in (None, 1, 2)
    }
    assert len(names) == 21


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("perm_swap_5_piqa", "is not a rate"),
        ("perm_swap_150pct_piqa", "rate must be"),
        ("perm_shuffle_5pct_piqa", "takes no rate"),
        ("perm_local_shuffle_3_piqa", "takes a window"),
        ("perm_swapp_5pct_piqa", "Did you mean 'swap'"),
    ],
)
def test_bad_names_say_what_to_write(name: str, message: str) -> None:
    with pytest.raises(PerturbationError, match=message):
        parse_name(name)
    with pytest.raises(PerturbationError):
        perturbed_task_name("shuffle", 0.5, "piqa")  # shuffle has no rate
