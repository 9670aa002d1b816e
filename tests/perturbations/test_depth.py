"""Laws of the evidence-depth schemes, text and position forms (unit tier, hypothesis)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from posgen.perturbations import PerturbationError, parse, registry
from posgen.perturbations.depth import (
    EvidenceDepth,
    PositionDepth,
    layout_as_is,
    passage_order,
    target_index,
)
from posgen.tasks import naming

DEPTHS = st.floats(0, 1, allow_nan=False)


@st.composite
def documents(draw: st.DrawFn) -> tuple[list[str], int]:
    k = draw(st.integers(2, 12))
    return [f"passage {i}" for i in range(k)], draw(st.integers(0, k - 1))


@st.composite
def contexts(draw: st.DrawFn) -> tuple[list[int], int, int]:
    """Block bounds (s_0, ..., s_k), the evidence block and the context length n."""
    k = draw(st.integers(2, 8))
    prefix = draw(st.integers(0, 5))
    lengths = draw(st.lists(st.integers(1, 6), min_size=k, max_size=k))
    bounds = list(np.cumsum([prefix, *lengths]))
    n = bounds[-1] + draw(st.integers(0, 5))
    return [int(b) for b in bounds], draw(st.integers(0, k - 1)), int(n)


@given(documents(), DEPTHS, st.integers(0, 2**32))
def test_text_form_moves_the_evidence_to_its_slot_and_keeps_the_others_in_order(
    doc, depth, seed
) -> None:
    passages, e = doc
    k = len(passages)
    res = EvidenceDepth(depth).reorder_passages(passages, e, seed)
    t = target_index(depth, k)
    assert sorted(res.passages) == sorted(passages)  # a permutation of the passages
    assert res.evidence == t == res.record.index and res.passages[t] == passages[e]
    others = [p for i, p in enumerate(passages) if i != e]
    assert [p for j, p in enumerate(res.passages) if j != t] == others
    assert res.record.realised == t / (k - 1) and res.record.k == k and res.record.source == e
    assert abs(res.record.realised - depth) <= 0.5 / (k - 1) + 1e-12  # the nearest slot
    assert res == EvidenceDepth(depth).reorder_passages(passages, e, seed + 1)  # no draw


@pytest.mark.parametrize(
    ("depth", "k", "t"),
    [(0, 5, 0), (1, 5, 4), (0.5, 2, 1), (0.25, 3, 1), (0.125, 5, 1), (0.5, 30, 15), (0.7, 11, 7)],
)
def test_target_slot_rounds_half_up_on_the_decimal_digits(depth, k, t) -> None:
    assert target_index(depth, k) == t


@given(st.lists(DEPTHS, min_size=2, max_size=5), st.integers(2, 40))
def test_target_slot_grows_with_depth(depths, k) -> None:
    slots = [target_index(d, k) for d in sorted(depths)]
    assert slots == sorted(slots) and slots[0] >= 0 and slots[-1] <= k - 1


def text_layout(bounds: list[int], e: int, n: int, depth: float) -> np.ndarray:
    """Where each original token lands when the text form reorders the blocks."""
    blocks = [list(range(a, b)) for a, b in itertools.pairwise(bounds)]
    moved = EvidenceDepth(depth).reorder_passages(blocks, e).passages
    sequence = list(range(bounds[0])) + [i for b in moved for i in b] + list(range(bounds[-1], n))
    where = np.empty(n, dtype=np.int64)
    where[sequence] = np.arange(n)
    return where


@given(contexts(), DEPTHS)
def test_position_form_is_the_text_forms_layout(ctx, depth) -> None:
    bounds, e, n = ctx
    values = PositionDepth(depth).values_for_blocks(bounds, e, n)
    assert values.dtype == np.int64 and values.shape == (n,)
    assert sorted(values.tolist()) == list(range(n))  # a permutation of arange(n)
    np.testing.assert_array_equal(values, text_layout(bounds, e, n, depth))
    assert values[: bounds[0]].tolist() == list(range(bounds[0]))  # the prefix stays
    assert values[bounds[-1] :].tolist() == list(range(bounds[-1], n))  # the rest stays


@given(contexts(), DEPTHS)
def test_position_layout_records_where_the_evidence_went(ctx, depth) -> None:
    bounds, e, n = ctx
    scheme = PositionDepth(depth)
    lay = scheme.layout(bounds, e, n)
    values = scheme.values_for_blocks(bounds, e, n)
    assert lay.evidence_start == values[bounds[e]] and lay.n == n
    assert lay.evidence_length == bounds[e + 1] - bounds[e]
    assert lay.distance_to_question == bounds[-1] - (lay.evidence_start + lay.evidence_length)
    if target_index(depth, len(bounds) - 1) == e:
        assert lay == layout_as_is(bounds, e, n)


@given(contexts())
def test_identity_at_the_evidences_own_depth_is_exactly_arange(ctx) -> None:
    bounds, e, n = ctx
    k = len(bounds) - 1
    own = e / (k - 1)
    assert target_index(own, k) == e
    values = PositionDepth(own).values_for_blocks(bounds, e, n)
    np.testing.assert_array_equal(values, np.arange(n, dtype=np.int64))
    assert values.dtype == np.int64
    assert EvidenceDepth(own).reorder_passages(list(range(k)), e).passages == list(range(k))


@pytest.mark.parametrize("text", ["depth:1.5", "depth:-0.1", "depth:nan", "depth:inf", "depth"])
@pytest.mark.parametrize("kind", ["text", "position"])
def test_bad_depth_is_refused_in_one_line(kind, text) -> None:
    with pytest.raises(PerturbationError) as err:
        parse(kind, text)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("value", [True, 1.5, -0.01, float("nan"), "0.5"])
def test_depth_dataclasses_validate(value) -> None:
    for cls in (EvidenceDepth, PositionDepth):
        with pytest.raises(PerturbationError, match=r"depth must be a number in \[0, 1\]"):
            cls(value)


def test_both_forms_are_registered_with_one_short_form() -> None:
    assert registry.get("text", "depth") is EvidenceDepth
    assert registry.get("position", "depth") is PositionDepth
    for kind in ("text", "position"):
        p = parse(kind, "depth:0.25")
        assert p.to_string() == "depth:0.25" and p.spec.to_dict()["params"] == {"depth": 0.25}
        assert registry.from_spec(p.spec.to_dict()) == p and not p.is_identity
    assert EvidenceDepth.moves == "passages" and parse("text", "swap:0.1").moves == "words"


@pytest.mark.parametrize(
    ("depth", "name"),
    [
        (0, "perm_depth_0pct_t"),
        (0.5, "perm_depth_50pct_t"),
        (1, "perm_depth_100pct_t"),
        (0.125, "perm_depth_12p5pct_t"),
    ],
)
def test_task_names_carry_the_depth_in_percent(depth, name) -> None:
    assert naming.format_name(EvidenceDepth(depth), "t") == name
    parsed = naming.parse_name(name)
    assert parsed is not None and parsed.perturbation == EvidenceDepth(float(depth))
    assert parsed.base_task == "t"


def test_a_depth_past_one_in_a_task_name_is_refused() -> None:
    with pytest.raises(PerturbationError, match=r"depth must be a number in \[0, 1\]"):
        naming.parse_name("perm_depth_150pct_posgen_kv")


def test_the_text_form_refuses_words_and_the_position_form_needs_blocks() -> None:
    with pytest.raises(PerturbationError, match="not the words of a text"):
        EvidenceDepth(0.5).apply("some words here", seed=1)
    with pytest.raises(PerturbationError, match="needs each document's passage spans"):
        PositionDepth(0.5).position_values(np.arange(10), seed=1)
    with pytest.raises(PerturbationError, match="needs each document's passage spans"):
        PositionDepth(0.5).draw(np.arange(10), 10, seed=1)


@pytest.mark.parametrize(
    ("bounds", "evidence", "n", "match"),
    [
        ([0, 3], 0, 5, "k >= 2"),
        ([0, 3, 3, 5], 0, 5, "increase strictly"),
        ([0, 3, 6], 0, 5, "increase strictly"),
        ([-1, 3, 5], 0, 5, "increase strictly"),
        ([0, 3, 5], 2, 5, "not one of the 2"),
    ],
)
def test_block_bounds_are_checked(bounds, evidence, n, match) -> None:
    with pytest.raises(ValueError, match=match):
        PositionDepth(0.5).values_for_blocks(bounds, evidence, n)


def test_one_passage_or_a_stray_evidence_index_is_refused() -> None:
    with pytest.raises(PerturbationError, match="at least 2 passages"):
        EvidenceDepth(0.5).reorder_passages(["only one"], 0)
    with pytest.raises(PerturbationError, match="not one of the 3 passages"):
        EvidenceDepth(0.5).reorder_passages(["a", "b", "c"], 3)
    assert passage_order(4, 3, 0) == [3, 0, 1, 2]
