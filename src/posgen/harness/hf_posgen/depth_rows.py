"""The passage blocks of each request's context under ``positions=depth:D``, from its
document.

An evidence-depth task's documents carry the field protocol's canonical fields
(``posgen_passages``, ``posgen_evidence``, ``posgen_question``; docs/depth.md), and
lm-eval's ``Instance`` carries its document (``.doc``). For a request's context string
(few-shot examples, a chat template or instructions before the document's own text are
its fixed prefix) :func:`char_bounds` finds the passages' character spans, and
:func:`context_blocks` maps them to the indices of the very tokens HFLM scores, through
the tokenizer's offsets: block b runs from the first token that starts at or after
passage b's first character to the next block's, the last one to the question.

:class:`DepthRequests` keeps, while lm-eval's ``loglikelihood`` or ``generate_until``
runs, which document each context belongs to, refuses in one line a request whose
document lacks the fields (a task that is not an evidence-depth task), and hands each
token request its context's blocks (:class:`~.batch_rows.BlockSource`).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import Any

from posgen.harness.hf_posgen.batch_rows import BlockSource
from posgen.harness.hf_posgen.chat_content import tail_offsets
from posgen.perturbations.base import PerturbationError
from posgen.perturbations.depth import PassageBlocks
from posgen.tasks.depth_protocol import EVIDENCE, PASSAGES, QUESTION, token_bounds

FIELDS = (PASSAGES, EVIDENCE, QUESTION)


def needs_blocks(positions: Any) -> bool:
    """Does the position scheme take its ids from each row's passage blocks?"""
    return bool(getattr(positions, "needs_blocks", False))


def refuse_without_fields(positions: Any, requests: Sequence[Any]) -> None:
    """Refuse, in one line naming the field protocol, the first request whose document
    lacks a canonical field (``positions=depth:D`` on a task without passages)."""
    for req in requests:
        doc = getattr(req, "doc", None)
        missing = [f for f in FIELDS if not isinstance(doc, Mapping) or f not in doc]
        if missing:
            raise PerturbationError(
                f"positions={positions.to_string()} moves the ids of a document's evidence "
                f"passage, but document {req.doc_id} of task {req.task_name!r} has no "
                f"{missing[0]}: run it on an evidence-depth task, one whose YAML declares "
                "metadata.posgen_depth (passages, evidence, question; the field protocol "
                "of docs/depth.md)"
            )


def char_bounds(context: str, passages: Sequence[str], question: str) -> list[int]:
    """Character bounds ``(c_0, ..., c_k)`` of the document's passage blocks in a
    rendered ``context``, read from its end: the question's last occurrence, then each
    passage's last occurrence ending before the next one starts (so the same passages in
    a few-shot example before the document are never taken for its own). ``c_k`` is the
    question's start (the end of the last passage when the question is not rendered as
    it is). ValueError when a passage is not there in order."""
    end = len(context)
    question_at = context.rfind(question) if question else -1
    limit = question_at if question_at >= 0 else end
    starts: list[int] = []
    for b in range(len(passages) - 1, -1, -1):
        at = context.rfind(passages[b], 0, limit) if passages[b] else -1
        if at < 0:
            raise ValueError(
                f"passage {b} of {len(passages)} is not in the rendered context before "
                f"character {limit}; doc_to_text must render the passages field as it is"
            )
        if b == len(passages) - 1 and question_at < 0:
            end = at + len(passages[b])
        starts.append(at)
        limit = at
    return [*reversed(starts), question_at if question_at >= 0 else end]


def context_blocks(tokenizer: Any, text: str, ids: Sequence[int], doc: Mapping) -> PassageBlocks:
    """The passage blocks of ``doc`` over the context tokens ``ids`` that HFLM encoded
    from ``text`` (leading special tokens, a BOS, before the text's own): the text's
    tokens with their character offsets must be the end of ``ids``, else refused."""
    why = "the passages of positions=depth, found among the context's tokens,"
    lead, offsets = tail_offsets(tokenizer, text, ids, PerturbationError, why, "the passages")
    starts = [-1] * lead + [start for start, _ in offsets]
    try:
        bounds = token_bounds(char_bounds(text, doc[PASSAGES], doc[QUESTION]), starts)
    except ValueError as exc:
        raise PerturbationError(f"positions=depth: {exc}") from None
    return PassageBlocks(tuple(bounds), int(doc[EVIDENCE]))


# how each lm-eval call's request finds its context's document
KEYS: dict[str, Callable[[Any], Any]] = {
    "loglikelihood": lambda request: tuple(request.args),  # (context, continuation)
    "generate_until": lambda request: request.args[0],  # the context
}


class DepthRequests:
    """Which document each context of the running lm-eval call belongs to, and its
    blocks over the tokens of ``tokenizer`` (computed once per context), under the
    position scheme ``positions()`` (the model's, read at each call)."""

    def __init__(self, tokenizer: Any, positions: Callable[[], Any] = lambda: None) -> None:
        self.tokenizer = tokenizer
        self.positions = positions
        self._docs: dict[Any, Mapping] = {}
        self._blocks: dict[tuple, BlockSource] = {}

    @property
    def active(self) -> bool:
        """Does the running call keep its contexts' documents?"""
        return bool(self._docs)

    @contextmanager
    def serving(self, requests: Sequence[Any], kind: str) -> Iterator[None]:
        """Within lm-eval's ``kind`` call, under a position scheme that needs blocks (else
        nothing is kept), each request's document; a document without the fields (or a
        rolling call, whose windows have no passages) is refused here, before any
        forward."""
        if kind not in KEYS:
            self.refuse_windows()
        positions = self.positions()
        if not needs_blocks(positions):
            yield
            return
        requests = list(requests)
        refuse_without_fields(positions, requests)
        self._docs = {KEYS[kind](req): req.doc for req in requests}
        try:
            yield
        finally:
            self._docs, self._blocks = {}, {}

    def refuse_windows(self) -> None:
        """Refuse a ``loglikelihood_rolling`` call under a scheme that needs blocks."""
        positions = self.positions()
        if needs_blocks(positions):
            raise PerturbationError(
                f"positions={positions.to_string()} moves the evidence passage of a "
                "context, which loglikelihood_rolling's perplexity windows are not: run it "
                "on a loglikelihood, multiple-choice or generate_until evidence-depth task "
                "(docs/depth.md)"
            )

    def blocks(self, key: Any, text: str, ids: Sequence[int]) -> BlockSource:
        """The blocks of the context ``text`` (whose document is found by ``key``)
        over its tokens ``ids``."""
        ids = [int(t) for t in ids]
        cached = self._blocks.get((text, tuple(ids)))
        if cached is None:
            doc = self._docs.get(key)
            if doc is None:
                raise RuntimeError(
                    "hf-posgen met a context whose request it did not see (lm-eval changed "
                    "how it batches?); it cannot tell its passages"
                )
            blocks = context_blocks(self.tokenizer, text, ids, doc)
            cached = self._blocks[(text, tuple(ids))] = BlockSource(blocks, len(ids))
        return cached

    def row(self, request: Any) -> BlockSource | None:
        """HFLM's token request ``((context, continuation), context_enc, _)`` -> its
        context's blocks (HFLM encodes the context without its trailing whitespace);
        None when none are kept."""
        strings, context_enc, _ = request
        if not self._docs or strings is None:
            return None
        return self.blocks(tuple(strings), strings[0].rstrip(), context_enc)

    def generation_rows(
        self, strings: Sequence[str] | None, whole: Sequence[Sequence[int]] | None
    ) -> list[BlockSource] | None:
        """The blocks of a generation batch's contexts (``whole[b]``: the tokens of
        ``strings[b]`` before any truncation); None when none are kept."""
        if not self._docs or strings is None or whole is None:
            return None
        return [self.blocks(s, s, ids) for s, ids in zip(strings, whole, strict=True)]
