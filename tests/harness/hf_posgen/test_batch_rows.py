"""One padded batch's rows from what HFLM pads and batches (no model)."""

from __future__ import annotations

import numpy as np
import pytest

from posgen.harness.hf_posgen.batch_rows import NO_DOCS, padded_rows

DOCS = [frozenset({("task", 0)}), NO_DOCS]


def test_each_rows_context_part_and_its_content_mask_cut_to_it():
    mask = np.array([True, False, True, True, False])  # over the whole context, 5 tokens
    rows = padded_rows([6, 3], [3, 1], DOCS, [mask, None])
    assert rows.lengths == [6, 3] and rows.docs == DOCS
    assert rows.contexts == [4, 3]  # n − m + 1: the context left after the cut from the left
    assert rows.content[0].tolist() == [False, True, True, False] and rows.content[1] is None


@pytest.mark.parametrize(("lengths", "conts"), [([6, 3], [3]), ([2, 3], [3, 1])])
def test_rows_that_do_not_match_the_batched_continuations_are_refused(lengths, conts):
    with pytest.raises(RuntimeError, match="could not match the padded rows"):
        padded_rows(lengths, conts, DOCS[: len(conts)], [None] * len(conts))


def test_a_content_mask_shorter_than_the_context_part_is_refused():
    with pytest.raises(RuntimeError, match="content masks do not cover"):
        padded_rows([6], [3], DOCS[:1], [np.ones(2, dtype=bool)])
