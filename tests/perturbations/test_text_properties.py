"""Laws of the text perturbations (unit tier, hypothesis)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from posgen.perturbations import PerturbationError, order_stats, parse
from posgen.perturbations.order_stats import combine_stats
from posgen.perturbations.text import AdjacentSwap, LocalShuffle, WordShuffle, WordSwap

WORD = st.text(
    alphabet=st.characters(blacklist_categories=("Zs", "Cc", "Zl", "Zp")), min_size=1, max_size=6
)
GAP = st.sampled_from([" ", "  ", "\n", "\t", " \n ", "\n\n"])


@st.composite
def texts(draw: st.DrawFn, min_words: int = 0, max_words: int = 60) -> str:
    words = draw(st.lists(WORD, min_size=min_words, max_size=max_words))
    gaps = draw(st.lists(GAP, min_size=len(words) + 1, max_size=len(words) + 1))
    gaps[0] = draw(st.sampled_from(["", " ", "\n"]))
    gaps[-1] = draw(st.sampled_from(["", "\n"]))
    return gaps[0] + "".join(w + g for w, g in zip(words, gaps[1:], strict=True))


SCHEMES = st.sampled_from(
    [
        WordSwap(0.3),
        WordSwap(1.0),
        AdjacentSwap(0.5),
        LocalShuffle(3),
        LocalShuffle(2),
        WordShuffle(),
    ]
)
SEEDS = st.integers(min_value=0, max_value=2**40)


def layout(text: str) -> list[str]:
    return re.split(r"\S+", text)


@given(texts(), SEEDS)
def test_rate_zero_is_the_identity(text: str, seed: int) -> None:
    for p in (WordSwap(0.0), AdjacentSwap(0.0)):
        res = p.apply(text, seed)
        assert res.text == text
        assert res.stats.fraction_moved == 0 and res.stats.idc == 0 and res.stats.dnd == 0


@given(texts(), SCHEMES, SEEDS)
def test_word_multiset_and_whitespace_layout_are_kept(text: str, p, seed: int) -> None:
    res = p.apply(text, seed)
    assert Counter(res.text.split()) == Counter(text.split())
    assert layout(res.text) == layout(text)


@given(
    texts(min_words=2),
    st.sampled_from([WordSwap, AdjacentSwap]),
    SEEDS,
    st.lists(st.floats(0, 1), min_size=2, max_size=4),
)
def test_pair_swaps_are_nested_across_rates(text: str, cls, seed: int, rates: list[float]) -> None:
    """The words moved at a smaller rate are moved, to the same place, at a larger one."""
    words = text.split()
    previous: dict[int, str] = {}
    for rate in sorted(rates):
        new = cls(rate).apply(text, seed).text.split()
        moved = {i: w for i, (w, o) in enumerate(zip(new, words, strict=True)) if w != o}
        assert all(moved.get(i) == w for i, w in previous.items())
        previous = moved


@given(texts(min_words=2), SEEDS, st.floats(0, 1))
def test_swap_moves_the_stochastically_rounded_pair_count(
    text: str, seed: int, rate: float
) -> None:
    """⌊r·n/2⌋ or ⌊r·n/2⌋ + 1 pairs (never more than ⌊n/2⌋): the rounding of r·n/2."""
    n = len(text.split())
    pairs = WordSwap(rate).apply(text, seed).stats.fraction_moved * n / 2
    low = np.floor(rate * n / 2)
    assert pairs == pytest.approx(min(low, n // 2)) or pairs == pytest.approx(min(low + 1, n // 2))


@given(texts(), SCHEMES, SEEDS)
def test_same_inputs_give_the_same_output(text: str, p, seed: int) -> None:
    assert p.apply(text, seed) == p.apply(text, seed)
    assert p.apply(text, seed, key="doc-1") == p.apply(text, seed, key="doc-1")


@given(texts(max_words=1), SCHEMES, SEEDS)
def test_fewer_than_two_words_pass_through_and_are_counted(text: str, p, seed: int) -> None:
    res = p.apply(text, seed)
    assert res.text == text and res.too_short


@given(texts(min_words=3), SEEDS)
def test_keep_last_keeps_the_final_words(text: str, seed: int) -> None:
    res = WordShuffle().apply(text, seed, keep_last=2)
    assert res.text.split()[-2:] == text.split()[-2:]
    assert res.stats.n == len(text.split()) - 2


@pytest.mark.parametrize("bad", [-0.1, 1.5, float("nan"), "0.1", True, None])
def test_rates_are_validated(bad) -> None:
    for cls in (WordSwap, AdjacentSwap):
        with pytest.raises(PerturbationError, match="rate must be a number in"):
            cls(bad)


def test_other_parameters_and_inputs_are_validated() -> None:
    with pytest.raises(PerturbationError, match="window must be an int >= 2"):
        LocalShuffle(1)
    with pytest.raises(TypeError, match="expected a str"):
        WordSwap(0.1).apply(b"bytes", 1)  # type: ignore[arg-type]
    with pytest.raises(TypeError, match="seed must be an int"):
        WordSwap(0.0).apply("a b c", "1")  # type: ignore[arg-type]
    with pytest.raises(PerturbationError, match="keep_last"):
        WordSwap(0.1).apply("a b c", 1, keep_last=-1)


def test_order_stats_exact_on_hand_made_cases() -> None:
    # slot t holds original item perm[t]
    s = order_stats(np.array([1, 0, 2, 3]), 2)  # swap the first two
    assert (s.n, s.fraction_moved, s.mean_displacement, s.idc) == (4, 0.5, 0.5, 0.5)
    # right neighbours: 0 had 1, now 2 -> changed; 1 had 2, now 0 -> changed; 2 had 3 -> kept
    assert s.dnd == pytest.approx(2 / 3)
    s = order_stats(np.array([3, 2, 1, 0]), 4)  # reversal: every neighbour changes
    assert (s.mean_displacement, s.dnd, s.idc) == (2.0, 1.0, 1.0)
    s = order_stats(np.array([1, 2, 3, 0]), 4)  # rotation: only item 3 loses its neighbour
    assert (s.mean_displacement, s.dnd, s.idc) == (1.5, 1 / 3, 1.0)
    s = order_stats(np.arange(5), 0)
    assert (s.fraction_moved, s.mean_displacement, s.dnd, s.idc) == (0, 0, 0, 0)


def test_combined_stats_weight_each_field_by_its_length() -> None:
    a = order_stats(np.array([1, 0, 2, 3]), 2)
    b = order_stats(np.array([1, 0]), 2)
    c = combine_stats([a, b])
    assert c.n == 6 and c.fraction_moved == pytest.approx(4 / 6)
    assert c.mean_displacement == pytest.approx((0.5 * 4 + 1.0 * 2) / 6)
    assert c.dnd == pytest.approx((2 / 3 * 3 + 1.0 * 1) / 4)


def test_text_stats_match_the_swap_they_made() -> None:
    text = "one two three four five six seven eight nine ten"
    res = WordSwap(0.2).apply(text, 7)
    new, old = res.text.split(), text.split()
    moved = [i for i, (a, b) in enumerate(zip(new, old, strict=True)) if a != b]
    assert len(moved) == 2 and res.stats.idc == 0.2
    assert res.stats.mean_displacement == pytest.approx(2 * abs(moved[0] - moved[1]) / 10)


_CHILD = """
import json, sys
from posgen.perturbations import parse
cases = json.loads(sys.stdin.read())
print(json.dumps([parse("text", s).apply(t, seed).text for s, t, seed in cases]))
"""


@settings(max_examples=1, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.sampled_from(["swap:0.3", "adjacent:0.5", "local_shuffle:3", "shuffle"]),
            texts(min_words=2),
            SEEDS,
        ),
        min_size=20,
        max_size=20,
    )
)
def test_output_is_byte_identical_in_another_process(cases) -> None:
    """A fresh interpreter (other hash seed, reversed order) gives the same bytes."""
    expected = [parse("text", s).apply(t, seed).text for s, t, seed in cases]
    proc = subprocess.run(
        [sys.executable, "-c", _CHILD],
        input=json.dumps(cases[::-1]),
        capture_output=True,
        text=True,
        check=True,
        env={"PYTHONHASHSEED": "12345", "PATH": ""},
    )
    got = json.loads(proc.stdout)[::-1]
    assert [g.encode() for g in got] == [e.encode() for e in expected]


def test_seed_and_key_change_the_draw() -> None:
    text = " ".join(f"w{i}" for i in range(40))
    p = parse("text", "shuffle")
    assert p.apply(text, 1).text != p.apply(text, 2).text
    assert p.apply(text, 1, key="a").text != p.apply(text, 1, key="b").text
