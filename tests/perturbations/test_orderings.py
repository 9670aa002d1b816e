"""The rate of the pair swaps is the expected fraction moved, at every length (unit tier).

Text and position swaps at the same nominal rate must move the same expected share of
items, whether a document has 10 words or 200 tokens; the stochastic rounding of the
pair count must keep the nesting across rates.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posgen.perturbations import parse
from posgen.perturbations.orderings import adjacent_pairs, n_swap_pairs, swap_pairs
from posgen.perturbations.seeding import item_rng

LENGTHS = (10, 29, 57, 200)
RATES = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
DRAWS = 1500


def _moved_fractions(kind: str, scheme: str, rate: float, n: int) -> np.ndarray:
    """Fraction of items moved by ``kind scheme:rate`` on ``DRAWS`` different items of
    length n (each item its own per-item stream, as in a run)."""
    p = parse(kind, f"{scheme}:{rate}")
    out = np.empty(DRAWS)
    for i in range(DRAWS):
        if kind == "text":
            text = " ".join(f"w{i}_{j}" for j in range(n))
            out[i] = p.apply(text, seed=11).stats.fraction_moved
        else:
            ids = np.arange(n, dtype=np.int64) + 1000 * i
            values = p.apply(ids, seed=11).values
            out[i] = float(np.mean(values != np.arange(n)))
    return out


@settings(max_examples=12, deadline=None)
@given(
    st.sampled_from([("text", "swap"), ("position", "swap"), ("text", "adjacent")]),
    st.sampled_from(LENGTHS),
    st.sampled_from(RATES),
)
def test_expected_fraction_moved_equals_the_rate(kind_scheme, n: int, rate: float) -> None:
    """Mean over many items of the fraction moved = r, within 4 binomial standard errors:
    the per-item fraction is 2·pairs/n with pairs ∈ {k, k+1}, so its sd is at most 1/n."""
    kind, scheme = kind_scheme
    fractions = _moved_fractions(kind, scheme, rate, n)
    tolerance = 4 * max(float(np.std(fractions)), 1 / n) / math.sqrt(DRAWS)
    assert abs(float(fractions.mean()) - rate) < tolerance


@pytest.mark.parametrize("kind", ["text", "position"])
def test_short_items_move_at_small_rates(kind: str) -> None:
    """A 29-word cloze context or a 40-token row moves at 1% and 2% (some items do)."""
    for n in (29, 40):
        for rate in (0.01, 0.02):
            assert _moved_fractions(kind, "swap", rate, n).max() > 0


@settings(max_examples=200, deadline=None)
@given(
    st.integers(0, 300),
    st.lists(st.floats(0, 1), min_size=2, max_size=5),
    st.integers(0, 2**32),
    st.sampled_from([swap_pairs, adjacent_pairs]),
)
def test_pairs_at_a_lower_rate_are_a_subset_of_those_at_a_higher_one(
    n: int, rates: list[float], seed: int, scheme
) -> None:
    previous: dict[int, int] = {}
    for rate in sorted(rates):
        perm, selected = scheme(n, rate, item_rng(seed, "nesting", b"item"))
        moved = {int(t): int(perm[t]) for t in np.flatnonzero(perm != np.arange(n))}
        assert len(moved) == selected  # disjoint pairs of distinct items: both move
        assert all(moved.get(t) == v for t, v in previous.items())
        previous = moved


@given(st.integers(1, 1000), st.floats(0, 1), st.floats(0, 1), st.floats(0, 0.999999))
def test_pair_count_is_monotone_in_the_rate_and_capped(n: int, r1: float, r2: float, u: float):
    lo, hi = sorted((r1, r2))
    assert n_swap_pairs(n, lo, u) <= n_swap_pairs(n, hi, u) <= n // 2
    assert n_swap_pairs(n, 0.0, u) == 0


def test_pair_count_expectation_is_exact_over_u() -> None:
    """E_u[⌊r·n/2 + u⌋] = r·n/2: averaged over a fine uniform grid of u."""
    grid = (np.arange(10_000) + 0.5) / 10_000
    for n in LENGTHS:
        for rate in RATES:
            mean = np.mean([n_swap_pairs(n, rate, float(u)) for u in grid])
            assert mean == pytest.approx(rate * n / 2, abs=2e-4)
