"""What hf-posgen learns about each row of a batch HFLM pads: its real length, the length
of its context part and the lm-eval documents it belongs to.

HFLM (lm-eval 0.4.x) right-pads its loglikelihood batches in ``pad_and_concat`` and takes
them from its batcher (``Collator.get_batched``); :func:`recording_rows` watches both and
leaves one :class:`PaddedRows` per padded batch in a queue, without changing batching or
numbers.

Documents. A row of a ``loglikelihood`` batch is one request, or the one request HFLM
runs for a group sharing the tokens ``context + continuation[:-1]`` (every answer choice
of a one-token multiple-choice document). A row of ``loglikelihood_rolling`` is one
window, and windows of several documents share a batch. So the documents of a row are
those of every request whose row it is, found by the row's tokens
(:func:`row_key`): a request's documents come from its ``(context, continuation)``
strings (:func:`docs_by_arguments`) or, for a window, from the request that lm-eval cut
it from (:func:`recording_window_docs`). A document is ``(task name, lm-eval doc_id)``.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator, Mapping
from contextlib import contextmanager
from typing import Any, NamedTuple

import numpy as np
import torch

from posgen.compat import patched
from posgen.perturbations.base import PerturbationError
from posgen.perturbations.depth import PassageBlocks

DocId = tuple[str | None, int]  # (task name, lm-eval doc_id)
NO_DOCS: frozenset[DocId] = frozenset()


class BlockSource(NamedTuple):
    """A request's passage blocks over its whole context of ``n`` tokens."""

    blocks: PassageBlocks
    n: int


class PaddedRows(NamedTuple):
    """One padded batch: per row its real length, context length, documents, which of
    its context tokens are content (None: all of them; see :mod:`.chat_content`) and its
    context's passage blocks (``positions=depth:D``, :mod:`.depth_rows`; None: unknown)."""

    lengths: list[int]
    contexts: list[int]
    docs: list[frozenset[DocId]]
    content: list[np.ndarray | None]
    blocks: list[PassageBlocks | None] | None = None


def docs_by_arguments(requests: Iterable[Any]) -> dict[tuple, frozenset[DocId]]:
    """``Instance.args`` -> the documents of every request with those arguments (requests
    without a ``doc_id`` belong to no document)."""
    found: dict[tuple, set[DocId]] = {}
    for req in requests:
        if req.doc_id is not None:
            found.setdefault(tuple(req.args), set()).add((req.task_name, int(req.doc_id)))
    return {args: frozenset(docs) for args, docs in found.items()}


def row_key(request: Any, whole_rows: bool) -> tuple:
    """What two of HFLM's token requests ``(strings, context, continuation)`` share when
    they give one identical row: the tokens ``context + continuation[:-1]`` and, unless the
    whole row is perturbed (rolling), where the context ends."""
    _, context, continuation = request
    tokens = tuple(context) + tuple(continuation[:-1])
    return (None if whole_rows else len(context), tokens)


def docs_by_row(
    requests: Iterable[Any],
    by_arguments: Mapping[tuple, frozenset[DocId]],
    by_window: Mapping[tuple[int, ...], frozenset[DocId]],
    whole_rows: bool,
) -> dict[tuple, frozenset[DocId]]:
    """:func:`row_key` -> the documents of every request with that row: a request with
    strings is looked up in ``by_arguments``, a rolling window (strings None) by its
    input tokens in ``by_window``."""
    found: dict[tuple, set[DocId]] = {}
    for request in requests:
        strings, context, continuation = request
        if strings is None:
            docs = by_window.get(tuple(context) + tuple(continuation[:-1]), NO_DOCS)
        else:
            docs = by_arguments.get(tuple(strings), NO_DOCS)
        found.setdefault(row_key(request, whole_rows), set()).update(docs)
    return {key: frozenset(docs) for key, docs in found.items()}


@contextmanager
def recording_window_docs(requests: list[Any]) -> Iterator[dict[tuple[int, ...], frozenset]]:
    """Within the block, every rolling window lm-eval cuts (``get_rolling_token_windows``,
    called once per request in request order by ``HFLM.loglikelihood_rolling``) leaves in
    the yielded dict its input tokens -> the documents of the request it was cut from. The
    input of a window ``(input, predicted)`` is what HFLM runs after making it disjoint
    (``context + continuation[:-1]`` equals ``input``). Raises ``RuntimeError`` when the
    calls did not match the requests one to one (lm-eval changed its rolling code)."""
    windows: dict[tuple[int, ...], frozenset[DocId]] = {}
    calls = [0]

    def recording(original: Callable) -> Callable:
        def cut(*args: Any, **kwargs: Any) -> Iterator[Any]:
            index = calls[0]
            calls[0] += 1
            req = requests[index] if index < len(requests) else None
            docs = NO_DOCS if req is None or req.doc_id is None else {(req.task_name, req.doc_id)}
            for window in original(*args, **kwargs):
                key = tuple(window[0])
                windows[key] = frozenset(windows.get(key, NO_DOCS) | docs)
                yield window

        return cut

    with patched("lm_eval.utils:get_rolling_token_windows", recording):
        yield windows
    if calls[0] != len(requests):
        raise RuntimeError(
            f"hf-posgen saw {calls[0]} rolling-window cuts for {len(requests)} requests "
            "(lm-eval changed loglikelihood_rolling?); cannot tell which document a window is"
        )


def padded_rows(
    lengths: list[int],
    conts: list[int],
    docs: list[frozenset[DocId]],
    masks: list[np.ndarray | None],
    blocks: list[BlockSource | None] | None = None,
) -> PaddedRows:
    """One padded batch's rows from the real ``lengths`` n of its rows, as HFLM pads them,
    and the continuation lengths m, documents, whole-context content masks and passage
    blocks its batcher gave for them: each row's context part ``n − m + 1`` (what remains
    after truncation from the left), its mask cut to that part and its blocks shifted to
    it. Raises ``RuntimeError`` when they do not match (lm-eval changed its batching or
    truncation)."""
    if len(conts) != len(lengths) or any(n < m for n, m in zip(lengths, conts, strict=True)):
        raise RuntimeError(
            f"hf-posgen could not match the padded rows {lengths} to the continuation "
            f"lengths {conts} HFLM batched (lm-eval changed its batching code?)"
        )
    contexts = [n - m + 1 for n, m in zip(lengths, conts, strict=True)]
    content = [
        None if mask is None else mask[len(mask) - c :]  # the context left after the cut
        for mask, c in zip(masks, contexts, strict=True)
    ]
    if any(m is not None and m.size != c for m, c in zip(content, contexts, strict=True)):
        raise RuntimeError(
            f"hf-posgen's content masks do not cover the context parts {contexts} of the "
            "padded rows (lm-eval changed how it truncates contexts?)"
        )
    if blocks is None or all(b is None for b in blocks):
        return PaddedRows(lengths, contexts, docs, content)
    cut = [None if b is None else truncated(b, c) for b, c in zip(blocks, contexts, strict=True)]
    return PaddedRows(lengths, contexts, docs, content, cut)


def truncated(blocks: BlockSource, kept: int) -> PassageBlocks:
    """A context's passage blocks (``blocks.blocks`` over its ``blocks.n`` tokens) in the
    last ``kept`` of them, what HFLM keeps when it cuts a context from the left; refused
    in one line when the cut reaches a passage (the evidence's depth would be another)."""
    cut = blocks.n - kept
    if cut > blocks.blocks.bounds[0]:
        raise PerturbationError(
            f"a context of {blocks.n} tokens was cut to its last {kept} (the model's "
            f"max_length), which drops tokens of its passages (they start at token "
            f"{blocks.blocks.bounds[0]}); positions=depth needs the whole passages: use "
            "shorter documents or a model that holds them"
        )
    return blocks.blocks.shifted(cut)


@contextmanager
def recording_rows(
    docs_of_row: Callable[[Any], frozenset[DocId]] = lambda request: NO_DOCS,
    content_of_row: Callable[[Any], np.ndarray | None] = lambda request: None,
    blocks_of_row: Callable[[Any], BlockSource | None] = lambda request: None,
) -> Iterator[deque[PaddedRows]]:
    """Within the block, every batch HFLM pads with ``pad_and_concat`` leaves in the yielded
    queue the real length n of each row, the length of its context part, its documents
    (``docs_of_row(request)``) and its content mask (``content_of_row(request)``, a mask
    over the request's whole context, cut here as the context is) and its context's
    passage blocks (``blocks_of_row(request)``, shifted here as the context is cut). A row is
    ``(context + continuation)[-(L+1):][:-1]``, so its context part is ``n − (m − 1)`` for
    a continuation of m tokens: the context that remains after truncation from the left.
    HFLM's batcher (``Collator.get_batched``) is watched for the requests of the batch
    being padded."""
    queue: deque[PaddedRows] = deque()
    batched: deque[tuple[list, list, list, list]] = deque()

    def recording_collator(original_collator: type) -> type:
        class RecordingCollator(original_collator):  # type: ignore[misc, valid-type]
            def get_batched(self, *args: Any, **kwargs: Any) -> Iterator[Any]:
                for chunk in super().get_batched(*args, **kwargs):
                    conts = [len(request[-1]) for request in chunk]
                    docs = [docs_of_row(request) for request in chunk]
                    masks = [content_of_row(r) for r in chunk]
                    batched.append((conts, docs, masks, [blocks_of_row(r) for r in chunk]))
                    yield chunk

        return RecordingCollator

    def recording(original_pad: Any) -> Any:
        return lambda *args, **kwargs: record(original_pad, *args, **kwargs)

    def record(original_pad, max_length: int, tensors: list[torch.Tensor], *args, **kwargs):
        lengths = [int(t.shape[-1]) for t in tensors]
        queue.append(padded_rows(lengths, *(batched.popleft() if batched else ([], [], [], []))))
        return original_pad(max_length, tensors, *args, **kwargs)

    with (
        patched("lm_eval.models.huggingface:pad_and_concat", recording),
        patched("lm_eval.models.huggingface:Collator", recording_collator),
    ):
        yield queue
