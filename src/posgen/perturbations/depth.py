"""Evidence depth ("lost in the middle"): the evidence passage moved among its distractors.

A document of this kind is k passages (one of them, index e, holds the evidence; the
others are distractors) followed by a question. Depth D ∈ [0, 1] names the slot the
evidence is moved to::

    t = round_half_up(D · (k − 1))          0: the first passage, 1: the last before the question

the other passages keep their own order around it. Two forms, one rule:

- text (:class:`EvidenceDepth`, ``depth:D``, kind ``text``): the passages of the document
  reordered (:meth:`EvidenceDepth.reorder_passages`); the prompt is rendered from them, so
  both the position code and the reading order change;
- position (:class:`PositionDepth`, ``depth:D``, kind ``position``): the tokens stay in the
  document's own order and each block takes the position ids it would have in the text
  form's order (:meth:`PositionDepth.values_for_blocks`), so only the position code changes.

Blocks of a tokenised context (``bounds = (s_0, s_1, ..., s_k)``, ``n`` tokens)::

    prefix [0, s_0) | block 0 [s_0, s_1) | ... | block k−1 [s_{k−1}, s_k) | rest [s_k, n)

block b is passage b and the separator after it (the last block's separator is what
stands before the question); the prefix (instructions) and the rest (the question, and
anything after it) never move. Both forms are deterministic: no random draw (the seed is
taken, as every scheme takes it, and changes nothing).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from decimal import ROUND_FLOOR, Decimal
from typing import Any, ClassVar, NamedTuple

import numpy as np

from posgen.perturbations.base import PerturbationError, registry
from posgen.perturbations.positions import PositionPerturbation
from posgen.perturbations.text import TextPerturbation, TextResult

#: the depths of the default sweep (both forms)
DEFAULT_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)


def check_depth(value: Any) -> None:
    """Refuse anything but a finite number in [0, 1] (booleans included)."""
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not 0.0 <= value <= 1.0
    ):
        raise PerturbationError(
            f"depth must be a number in [0, 1] (0: the first passage, 1: the last before "
            f"the question), got {value!r}"
        )


def target_index(depth: float, k: int) -> int:
    """The slot ``t = round_half_up(depth · (k − 1))`` of the evidence among ``k`` passages,
    computed on the decimal digits of ``repr(depth)`` (the digits a task name carries), so
    that ``0.25 · 2 = 0.5`` rounds up to 1 and no binary rounding moves a tie."""
    check_depth(depth)
    if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 2:
        raise PerturbationError(f"evidence depth needs at least 2 passages, got {k!r}")
    exact = Decimal(repr(float(depth))) * (int(k) - 1) + Decimal("0.5")
    return int(exact.to_integral_value(rounding=ROUND_FLOOR))


def passage_order(k: int, evidence: int, target: int) -> list[int]:
    """The new order of ``k`` passages: ``order[j]`` is the original index of the passage
    in slot j; the evidence ``evidence`` is in slot ``target``, the others in their order."""
    if isinstance(evidence, bool) or not 0 <= evidence < k:
        raise PerturbationError(f"evidence index {evidence!r} is not one of the {k} passages")
    if not 0 <= target < k:
        raise PerturbationError(f"target slot {target!r} is not one of the {k} slots")
    others = [i for i in range(k) if i != evidence]
    return [*others[:target], evidence, *others[target:]]


@dataclass(frozen=True)
class DepthRecord:
    """What a depth move did to one document: nominal depth, realised slot and depth."""

    nominal: float  # D as asked
    index: int  # t, the evidence's slot after the move
    k: int  # passages in the document
    source: int  # e, the evidence's slot before the move

    @property
    def realised(self) -> float:
        """``t / (k − 1)``: the depth the evidence really sits at."""
        return self.index / (self.k - 1)

    def to_dict(self) -> dict[str, Any]:
        return {
            "nominal": self.nominal,
            "index": self.index,
            "realised": self.realised,
            "k": self.k,
            "source": self.source,
        }


@dataclass(frozen=True)
class PassageResult:
    """The passages in their new order, the evidence's new index and the record."""

    passages: list[Any]
    evidence: int
    order: list[int]
    record: DepthRecord


class DepthMixin:
    """What both forms share: ``depth`` ∈ [0, 1] is the short form's value; no random
    stream; never the identity as a scheme (whether a document moves depends on where
    its own evidence sits). Put it first among the bases."""

    short_param: ClassVar[str] = "depth"
    uses_rng: ClassVar[bool] = False
    depth: float

    def validate(self) -> None:
        check_depth(self.depth)

    def target(self, k: int) -> int:
        """The evidence's slot among ``k`` passages at this depth."""
        return target_index(self.depth, k)


@registry.register
@dataclass(frozen=True)
class EvidenceDepth(DepthMixin, TextPerturbation):
    """The evidence passage moved to depth ``depth`` in the text (``depth:D``).

    Acts on a document's list of passages, not on the words of a text:
    :meth:`reorder_passages`. Its tasks are ``perm_depth_<D>pct_<task>`` for any task that
    declares the passage fields (``docs/depth.md``)."""

    name: ClassVar[str] = "depth"
    moves: ClassVar[str] = "passages"
    depth: float = 0.5

    def reorder(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, int]:
        raise PerturbationError(self._not_words())

    def apply(
        self, text: str, seed: int, key: bytes | str | None = None, keep_last: int = 0
    ) -> TextResult:
        raise PerturbationError(self._not_words())

    def _not_words(self) -> str:
        return (
            f"{self.to_string()} moves a document's evidence passage, not the words of a "
            "text: use reorder_passages(passages, evidence, seed), or the task name "
            f"perm_depth_{self.level_token()}_<task> of a task that declares its passages"
        )

    def reorder_passages(
        self, passages: Sequence[Any], evidence: int, seed: int = 0
    ) -> PassageResult:
        """The passages with the evidence (index ``evidence``) moved to slot
        ``t = round_half_up(depth · (k − 1))`` and the others in their own order.

        ``seed`` is taken as by every scheme and changes nothing (no draw is needed).
        Raises :class:`PerturbationError` for fewer than two passages or an evidence
        index outside them."""
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"{self.name}: seed must be an int, got {seed!r}")
        k = len(passages)
        t = self.target(k)
        order = passage_order(k, evidence, t)
        record = DepthRecord(float(self.depth), t, k, int(evidence))
        return PassageResult([passages[i] for i in order], t, order, record)


@dataclass(frozen=True)
class BlockLayout:
    """Where the evidence block sits among the context's tokens (after a move, or as it
    is): its first token's position, its length, the tokens between its end and the
    question (the rest's start, ``s_k``), and the context's length."""

    evidence_start: int
    evidence_length: int
    question_start: int
    n: int

    @property
    def distance_to_question(self) -> int:
        return self.question_start - (self.evidence_start + self.evidence_length)

    def to_dict(self) -> dict[str, int]:
        return {
            "evidence_start": self.evidence_start,
            "evidence_length": self.evidence_length,
            "distance_to_question": self.distance_to_question,
            "question_start": self.question_start,
            "n": self.n,
        }


def check_bounds(bounds: Sequence[int], evidence: int, n: int) -> np.ndarray:
    """``bounds`` as an int64 array after checking it: k + 1 ≥ 3 increasing values with
    ``0 ≤ s_0`` and ``s_k ≤ n`` (every passage block holds a token) and
    ``0 ≤ evidence < k``. ValueError saying what is wrong."""
    s = np.asarray(bounds, dtype=np.int64)
    if s.ndim != 1 or s.size < 3:
        raise ValueError(f"bounds must be k + 1 >= 3 token offsets (k >= 2 passages), got {s}")
    if s[0] < 0 or s[-1] > n or np.any(np.diff(s) <= 0):
        raise ValueError(
            f"bounds {s.tolist()} must increase strictly from >= 0 to <= n = {n} "
            "(every passage block holds at least one token)"
        )
    k = s.size - 1
    if isinstance(evidence, bool) or not 0 <= evidence < k:
        raise ValueError(f"evidence index {evidence!r} is not one of the {k} passage blocks")
    return s


def block_starts(bounds: np.ndarray, order: Sequence[int]) -> np.ndarray:
    """The first position of each block (by original index) when the blocks are laid out
    from ``s_0`` in ``order``, each keeping its length."""
    lengths = np.diff(bounds)
    starts = np.empty(lengths.size, dtype=np.int64)
    at = int(bounds[0])
    for b in order:
        starts[b] = at
        at += int(lengths[b])
    return starts


class PassageBlocks(NamedTuple):
    """One row's passage blocks in its context tokens: ``bounds = (s_0, ..., s_k)`` (the
    module docstring) and ``evidence``, the evidence block's index."""

    bounds: tuple[int, ...]
    evidence: int

    def shifted(self, by: int) -> PassageBlocks:
        """The blocks of the same tokens after ``by`` tokens were cut from the left of the
        context (``by`` may be negative: tokens added before it)."""
        return PassageBlocks(tuple(int(s) - by for s in self.bounds), self.evidence)


@registry.register
@dataclass(frozen=True)
class PositionDepth(DepthMixin, PositionPerturbation):
    """The evidence block takes the position ids it would have at depth ``depth``
    (``positions=depth:D``): the tokens stay in the document's order.

    Needs the document's passage blocks, which a sequence of token ids alone does not
    give: the model side calls :meth:`values_for_blocks` per row; :meth:`values` refuses."""

    name: ClassVar[str] = "depth"
    #: the model side plans it from each row's :class:`PassageBlocks`
    #: (:meth:`row_offsets`), never from :meth:`values`
    needs_blocks: ClassVar[bool] = True
    depth: float = 0.5

    def values(self, n: int, rng: np.random.Generator | None) -> tuple[np.ndarray, int]:
        raise PerturbationError(
            f"positions={self.to_string()} needs each document's passage spans (the blocks "
            "of passages and which one is the evidence), which token ids alone do not "
            "give; run it on a task that declares its passages (docs/depth.md)"
        )

    def values_for_blocks(self, bounds: Sequence[int], evidence: int, n: int) -> np.ndarray:
        """Position ids ``p`` ``[n]`` (int64) of a context of ``n`` tokens whose passage
        blocks are ``bounds = (s_0, ..., s_k)`` (the module docstring), the evidence
        block being ``evidence``:

            p[s_b + r] = start'_b + r     for a passage block b and 0 ≤ r < s_{b+1} − s_b
            p[i] = i                      in the prefix [0, s_0) and the rest [s_k, n)

        where ``start'_b`` is block b's first position when the blocks are laid out from
        ``s_0`` in :func:`passage_order` (evidence at ``t = round_half_up(depth·(k−1))``).
        A permutation of ``arange(n)``: the ids the tokens would have in the text form's
        order. Exactly ``arange(n)`` when ``t == evidence``."""
        s = check_bounds(bounds, evidence, n)
        k = s.size - 1
        t = self.target(k)
        values = np.arange(n, dtype=np.int64)
        if t == evidence:
            return values
        starts = block_starts(s, passage_order(k, evidence, t))
        for b in range(k):
            values[s[b] : s[b + 1]] = starts[b] + np.arange(s[b + 1] - s[b], dtype=np.int64)
        return values

    def row_offsets(self, blocks: PassageBlocks, span: int, n: int) -> np.ndarray:
        """Offsets ``p[t] − t`` ``[n]`` (int64) of a row of ``n`` tokens whose first
        ``span`` are its context with passage ``blocks``: :meth:`values_for_blocks` over
        the context, 0 after it (a continuation, generated tokens: their own positions
        after the context, as for every scheme that moves a context)."""
        if not 0 < span <= n:
            raise ValueError(f"{self.name}: span {span} outside 1..{n}")
        offsets = np.zeros(n, dtype=np.int64)
        values = self.values_for_blocks(blocks.bounds, blocks.evidence, span)
        offsets[:span] = values - np.arange(span, dtype=np.int64)
        return offsets

    def realised(self, blocks: PassageBlocks, span: int) -> dict[str, Any]:
        """What a row's ids realise beside the nominal depth: ``depth_nominal`` (D),
        ``depth_target`` (the slot t) among ``depth_k`` blocks, ``depth_source`` (the
        evidence's own slot), ``depth_realised`` (t / (k − 1)), and in tokens where the
        evidence's ids put it: ``depth_evidence_offset`` (its first id),
        ``depth_evidence_length``, ``depth_to_question`` (ids between its end and the
        question) and ``depth_n`` (the context's tokens)."""
        k = len(blocks.bounds) - 1
        t = self.target(k)
        where = self.layout(blocks.bounds, blocks.evidence, span)
        return {
            "depth_nominal": float(self.depth),
            "depth_target": t,
            "depth_k": k,
            "depth_source": int(blocks.evidence),
            "depth_realised": t / (k - 1),
            "depth_evidence_offset": where.evidence_start,
            "depth_evidence_length": where.evidence_length,
            "depth_to_question": where.distance_to_question,
            "depth_n": where.n,
        }

    def layout(self, bounds: Sequence[int], evidence: int, n: int) -> BlockLayout:
        """Where the evidence block's position ids put it (:meth:`values_for_blocks`):
        the realised depth in tokens beside the nominal one."""
        s = check_bounds(bounds, evidence, n)
        k = s.size - 1
        starts = block_starts(s, passage_order(k, evidence, self.target(k)))
        length = int(s[evidence + 1] - s[evidence])
        return BlockLayout(int(starts[evidence]), length, int(s[-1]), int(n))


def layout_as_is(bounds: Sequence[int], evidence: int, n: int) -> BlockLayout:
    """Where the evidence block sits in a context as it is (a text-form document after
    its move, or an unperturbed one): no move."""
    s = check_bounds(bounds, evidence, n)
    length = int(s[evidence + 1] - s[evidence])
    return BlockLayout(int(s[evidence]), length, int(s[-1]), int(n))
