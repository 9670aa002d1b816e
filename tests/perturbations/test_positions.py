"""Unit tests of the position schemes: parsing, validation, determinism, nesting."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posgen.perturbations import PerturbationError, parse, registry
from posgen.perturbations.orderings import n_swap_pairs
from posgen.perturbations.positions import PositionPerturbation

IDS = np.arange(100, 160, dtype=np.int64)
REORDERINGS = ("swap:0.3", "adjacent:0.3", "local_shuffle:4", "shuffle")


def test_every_scheme_is_registered_under_kind_position():
    assert registry.names("position") == [
        "adjacent",
        "depth",
        "local_shuffle",
        "scale",
        "shift",
        "shuffle",
        "swap",
    ]
    for name in registry.names("position"):
        assert issubclass(registry.get("position", name), PositionPerturbation)


@pytest.mark.parametrize(
    "text",
    [
        "swap:1.5",
        "swap:-0.1",
        "adjacent:2",
        "local_shuffle:1",
        "shift:-3",
        "scale:0",
        "scale:-1",
        "shift:1.5",
        "shuffle:3",
    ],
)
def test_invalid_specs_are_refused(text):
    with pytest.raises(PerturbationError):
        parse("position", text)


def test_unknown_scheme_lists_the_accepted_forms():
    with pytest.raises(PerturbationError, match="swap:RATE") as err:
        parse("position", "swapp:0.1")
    assert "Did you mean 'swap'" in str(err.value)


@pytest.mark.parametrize("text", REORDERINGS)
def test_reorderings_are_permutations_and_deterministic(text):
    p = parse("position", text)
    a = p.apply(IDS, seed=7).values
    assert sorted(a.tolist()) == list(range(IDS.size))
    assert np.array_equal(a, p.apply(IDS.tolist(), seed=7).values)
    assert np.array_equal(a, p.position_values(IDS, seed=7))  # the fast path the model uses
    assert not np.array_equal(a, np.arange(IDS.size))
    assert not np.array_equal(a, p.apply(IDS, seed=8).values)
    assert not np.array_equal(a, p.apply(IDS + 1, seed=7).values)  # keyed by content


def test_swap_moves_the_rounded_pair_count_and_is_nested():
    n = IDS.size
    previous: set[int] = set()
    for rate in (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0):
        values = parse("position", f"swap:{rate}").apply(IDS, seed=3).values
        moved = set(np.flatnonzero(values != np.arange(n)).tolist())
        assert len(moved) // 2 in (n_swap_pairs(n, rate, 0.0), n_swap_pairs(n, rate, 0.999999))
        assert previous <= moved  # nested: every pair swapped at a lower rate stays swapped
        assert np.array_equal(values[values], np.arange(n))  # an involution: pairs
        previous = moved


def test_local_shuffle_stays_within_windows():
    values = parse("position", "local_shuffle:4").apply(IDS, seed=1).values
    assert np.array_equal(values // 4, np.arange(IDS.size) // 4)


def test_shift_and_scale_values():
    assert parse("position", "shift:5").apply([1, 2, 3], 0).values.tolist() == [5, 6, 7]
    scaled = parse("position", "scale:0.5").apply([1, 2, 3], 0).values
    assert scaled.dtype == np.float64 and scaled.tolist() == [0.0, 0.5, 1.0]


@pytest.mark.parametrize("text", ["swap:0", "adjacent:0", "shift:0", "scale:1"])
def test_identities(text):
    p = parse("position", text)
    assert p.is_identity
    assert p.apply(IDS, 5).values.tolist() == list(range(IDS.size))


def test_order_stats_describe_the_change():
    stats = parse("position", "swap:0.2").apply(IDS, 1).stats
    assert stats.n == IDS.size and stats.fraction_moved == pytest.approx(0.2)
    assert stats.idc == pytest.approx(0.2)
    assert parse("position", "shift:9").apply(IDS, 1).stats.idc == 0.0


def test_spec_round_trip():
    p = parse("position", "local_shuffle:5")
    assert registry.from_spec(p.spec.to_dict()) == p
    assert p.spec.to_string() == "local_shuffle:5"


@settings(max_examples=60, deadline=None)
@given(
    ids=st.lists(st.integers(0, 50_000), min_size=0, max_size=80),
    text=st.sampled_from(REORDERINGS),
    seed=st.integers(-(2**40), 2**40),
)
def test_property_reorderings_permute_the_real_tokens(ids, text, seed):
    values = parse("position", text).apply(ids, seed).values
    assert values.dtype == np.int64
    assert sorted(values.tolist()) == list(range(len(ids)))


@pytest.mark.parametrize("text", [*REORDERINGS, "shift:5", "scale:0.5"])
def test_row_values_draw_the_span_from_its_tokens_and_keep_the_rest(text):
    p = parse("position", text)
    row = p.row_values(IDS, 40, seed=7)
    if p.uses_rng:  # the span's draw is the span's own; the rest stays in order
        assert np.array_equal(row[:40], p.position_values(IDS[:40], seed=7))
        assert np.array_equal(row[40:], np.arange(40, IDS.size))
        assert np.array_equal(row[:40], p.row_values(np.r_[IDS[:40], 7, 8], 40, seed=7)[:40])
    else:  # a frame transform moves the whole row
        assert np.array_equal(row, p.position_values(IDS, seed=7))
    with pytest.raises(ValueError, match="span"):
        p.row_values(IDS, 0, seed=7)
