"""The rows of the loglikelihood batches one hf-posgen model is scoring now.

A perturbed forward needs, per row of the right-padded batch HFLM hands to
``_model_call``: its real length, how many of its leading tokens are perturbed (the
context of a ``loglikelihood`` request; the whole window of ``loglikelihood_rolling``),
which of those are content under a chat template, and (for a plan observer) the lm-eval
documents it belongs to. :class:`LoglikelihoodRows` holds that state across HFLM's calls:
the documents of the requests (:meth:`~LoglikelihoodRows.scoring`,
:meth:`~LoglikelihoodRows.rolling`), the queue :func:`.batch_rows.recording_rows` fills
while HFLM pads (:meth:`~LoglikelihoodRows.recording`), and one
:class:`~.batch_rows.PaddedRows` taken per forward (:meth:`~LoglikelihoodRows.take`);
HFLM's shared forward for requests whose contexts end at different tokens is turned off
while they are scored (:meth:`~LoglikelihoodRows.forwards_apart`).
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from posgen.harness.hf_posgen.batch_rows import (
    NO_DOCS,
    DocId,
    PaddedRows,
    docs_by_arguments,
    docs_by_row,
    recording_rows,
    recording_window_docs,
    row_key,
)
from posgen.harness.hf_posgen.depth_rows import DepthRequests


def split_differently(requests: Iterable[Any]) -> bool:
    """Do two requests share the tokens ``context + continuation[:-1]`` (HFLM's
    one-forward group) but split them at different points?"""
    split_of: dict[tuple[int, ...], int] = {}
    for _, context, continuation in requests:
        tokens = tuple(context) + tuple(continuation[:-1])
        if split_of.setdefault(tokens, len(continuation)) != len(continuation):
            return True
    return False


class LoglikelihoodRows:
    """What one model knows about the rows of the batches HFLM is scoring now."""

    def __init__(self, depth: DepthRequests | None = None) -> None:
        self.depth = depth or DepthRequests(None)  # each context's passages (depth:D)
        self.queue: deque[PaddedRows] | None = None  # while HFLM pads a perturbed call
        self.whole_rows = False  # a rolling call: each window is perturbed whole
        # the documents of the requests being scored, while a plan observer is set
        self._by_arguments: dict[tuple, frozenset[DocId]] = {}
        self._by_window: dict[tuple[int, ...], frozenset[DocId]] = {}

    @contextmanager
    def scoring(self, requests: Any, observed: bool) -> Iterator[None]:
        """Within a ``loglikelihood`` call: with ``observed``, which documents ask what;
        under ``positions=depth:D``, each context's document."""
        self._by_arguments = docs_by_arguments(requests) if observed else {}
        try:
            with self.depth.serving(requests, "loglikelihood"):
                yield
        finally:
            self._by_arguments = {}

    @contextmanager
    def rolling(self, requests: Any, observed: bool) -> Iterator[None]:
        """Within a ``loglikelihood_rolling`` call: rows are whole windows and, with
        ``observed``, each window is traced to the document it was cut from
        (``positions=depth:D`` refused: a window has no passages)."""
        self.depth.refuse_windows()
        self.whole_rows = True
        try:
            if not observed:
                yield
                return
            with recording_window_docs(list(requests)) as windows:
                self._by_window = windows
                yield
        finally:
            self.whole_rows = False
            self._by_window = {}

    @contextmanager
    def recording(
        self,
        requests: Any,
        observed: bool,
        content_of_row: Callable[[Any], np.ndarray | None],
    ) -> Iterator[None]:
        """Within HFLM's ``_loglikelihood_tokens``: every batch it pads is queued with its
        rows' documents (with ``observed``), content masks and passage blocks."""
        rows = (
            docs_by_row(requests, self._by_arguments, self._by_window, self.whole_rows)
            if observed
            else {}
        )
        whole = self.whole_rows
        with recording_rows(
            lambda request: rows.get(row_key(request, whole), NO_DOCS),
            content_of_row,
            self.depth.row,
        ) as queue:
            self.queue = queue
            try:
                yield
            finally:
                self.queue = None

    @contextmanager
    def forwards_apart(self, lm: Any, requests: Any) -> Iterator[None]:
        """Within the block HFLM's ``logits_cache`` on ``lm`` is off when two ``requests``
        share the tokens ``context + continuation[:-1]``, which HFLM answers from one
        forward, but end their contexts at different tokens (:func:`split_differently`):
        perturbed, each context needs its own forward. Rolling windows, perturbed whole,
        still share. Restored on exit."""
        shared_logits = lm.logits_cache
        if not self.whole_rows and split_differently(requests):
            lm.logits_cache = False
        try:
            yield
        finally:
            lm.logits_cache = shared_logits

    @contextmanager
    def paused(self) -> Iterator[None]:
        """Within the block (HFLM's batch-size probe, unpadded) no batch is taken from the
        queue."""
        queue, self.queue = self.queue, None
        try:
            yield
        finally:
            self.queue = queue

    def take(self, inps: torch.Tensor) -> PaddedRows:
        """Real lengths of the rows of a right-padded batch, as HFLM padded it, how many
        leading tokens of each are perturbed (the context; the whole row when rolling) and
        the documents of each. A call from outside ``_loglikelihood_tokens`` (batch-size
        detection) is unpadded and belongs to no document."""
        batch, width = inps.shape
        if self.queue is None:
            return PaddedRows([width] * batch, [width] * batch, [NO_DOCS] * batch, [None] * batch)
        if not self.queue:
            raise RuntimeError(
                "hf-posgen could not see how HFLM padded this batch (lm-eval "
                "changed its padding code?); refusing to guess the real tokens"
            )
        lengths, contexts, docs, content, blocks = self.queue.popleft()
        if (
            len(lengths) != batch
            or max(lengths) != width
            or any(bool(inps[b, n:].any()) for b, n in enumerate(lengths))
        ):
            raise RuntimeError(
                f"recorded row lengths {lengths} do not match the padded batch "
                f"of shape {tuple(inps.shape)}"
            )
        spans = list(lengths) if self.whole_rows else contexts
        return PaddedRows(lengths, spans, docs, content, blocks)
