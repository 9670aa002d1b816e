"""The rules the cloze and recall tasks share (unit tier)."""

from __future__ import annotations

import pytest

from posgen.tasks.sentence_items import STOP_WORDS, pick_disjoint, target_word


def test_target_words() -> None:
    assert target_word("Warwickshire.") == "Warwickshire"
    assert target_word('register.")') == "register"
    for token in ("1582,", "HTML.", "which", "Through", "was", "re-raised", "(portrait"):
        assert target_word(token) is None, token
    assert "through" in STOP_WORDS


def test_pick_disjoint_takes_rank_order_skips_overlaps_returns_source_order() -> None:
    cands = [
        ("a", (0, 5, 7), "first by rank"),
        ("b", (0, 7, 9), "shares sentence 7 with the first"),
        ("c", (0, 0, 2), "disjoint"),
        ("d", (1, 5, 7), "another stream"),
    ]
    picked = pick_disjoint(cands, 3, "test")
    assert [c[2] for c in picked] == ["disjoint", "first by rank", "another stream"]
    assert [c[2] for c in pick_disjoint(cands, 1, "test")] == ["first by rank"]
    with pytest.raises(ValueError, match="test: only 3 disjoint items, need 4"):
        pick_disjoint(cands, 4, "test")
