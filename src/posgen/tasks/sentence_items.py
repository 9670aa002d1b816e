"""What the sentence-completion tasks (``posgen_cloze``, ``posgen_recall``) share: which
word may be a target, and how items are picked from the candidates of a source.

A target is a whole word of at least four letters, lower-case after its first letter
(so no acronyms, numbers or code), with any trailing punctuation removed, that is not a
common function word (``STOP_WORDS``): the words a reader could only get from context.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

STOP_WORDS = frozenset(
    [
        "about",
        "above",
        "after",
        "again",
        "against",
        "being",
        "below",
        "between",
        "both",
        "could",
        "does",
        "doing",
        "down",
        "during",
        "each",
        "from",
        "further",
        "have",
        "having",
        "here",
        "into",
        "itself",
        "just",
        "more",
        "most",
        "once",
        "only",
        "other",
        "over",
        "same",
        "shall",
        "should",
        "some",
        "such",
        "than",
        "that",
        "their",
        "theirs",
        "them",
        "then",
        "there",
        "these",
        "they",
        "this",
        "those",
        "through",
        "under",
        "until",
        "upon",
        "very",
        "what",
        "when",
        "where",
        "which",
        "while",
        "will",
        "with",
        "would",
        "your",
        "yours",
        "also",
        "thus",
    ]
)
_TARGET = re.compile(r"^([A-Za-z][a-z]{3,})[.,;:!?\"')\]]*$")


def target_word(token: str) -> str | None:
    """The word of a whitespace-separated token when it qualifies as a target
    (``"Warwickshire."`` -> ``"Warwickshire"``), else None (``"1582,"``, ``"which"``)."""
    m = _TARGET.match(token)
    if m is None or m.group(1).lower() in STOP_WORDS:
        return None
    return m.group(1)


def pick_disjoint(cands: Sequence[tuple[Any, ...]], k: int, what: str) -> list[tuple[Any, ...]]:
    """``k`` candidates ``(rank, (stream, first, last sentence), ...)`` taken in rank order,
    skipping any that shares a sentence with one already taken, returned in source order
    (by ``(stream, first, last)``); ValueError naming ``what`` if fewer than ``k`` exist."""
    picked: list[tuple[Any, ...]] = []
    taken: set[tuple[int, int]] = set()
    for cand in sorted(cands):
        s_i, a, j = cand[1]
        span = {(s_i, t) for t in range(a, j + 1)}
        if len(picked) < k and not span & taken:
            picked.append(cand)
            taken |= span
    if len(picked) < k:
        raise ValueError(f"{what}: only {len(picked)} disjoint items, need {k}")
    return sorted(picked, key=lambda c: c[1])
