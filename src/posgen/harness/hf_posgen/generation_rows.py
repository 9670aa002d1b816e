"""The rows of the generation batch one hf-posgen model is running now.

``HFLM.generate_until`` encodes each batch of context strings (``tok_batch_encode``)
right before it generates from their tokens (``_model_generate``), which sees token ids
only. :class:`GenerationRows` keeps what a generation plan needs from the strings: under
a chat template or under ``positions=depth:D`` each context's whole tokens (its content
is found from them, :mod:`.chat_content`; its passage blocks, :mod:`.depth_rows`), and
for a plan observer the lm-eval documents of each context.
:func:`left_padded_lengths` reads each row's real tokens from the attention mask.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from typing import Any

import torch

from posgen.harness.hf_posgen.batch_rows import NO_DOCS, BlockSource, DocId
from posgen.harness.hf_posgen.depth_rows import DepthRequests


def left_padded_lengths(context: torch.Tensor, mask: torch.Tensor | None) -> list[int]:
    """The number of real tokens of each row of a left-padded batch ``[B, W]``: its
    attention ``mask`` is 0 on the padding, then 1 to the end of the row."""
    if mask is None:
        raise RuntimeError(
            "hf-posgen generates under a perturbation only with the attention mask of the "
            "left-padded contexts (lm-eval's HFLM passes it to generate)"
        )
    mask = mask.detach().to("cpu", torch.int64).reshape(context.shape)
    lengths, width = mask.sum(dim=1).tolist(), context.shape[1]
    for b, n in enumerate(lengths):
        if n < 1 or bool(mask[b, width - n :].ne(1).any()):
            raise RuntimeError(
                f"row {b} of the generation batch is not left-padded (attention mask "
                f"{mask[b].tolist()}); hf-posgen needs its real tokens last"
            )
    return [int(n) for n in lengths]


class GenerationRows:
    """What one model knows about the contexts of the generation batch it runs now."""

    def __init__(self, depth: DepthRequests | None = None) -> None:
        self.depth = depth or DepthRequests(None)  # each context's passages (depth:D)
        self._docs: dict[str, frozenset[DocId]] = {}  # context string -> its documents
        self._batch: tuple[list[str], torch.Tensor, list[list[int]] | None] | None = None

    @contextmanager
    def running(self, requests: Sequence[Any], observed: bool) -> Iterator[None]:
        """Within a ``generate_until`` call: with ``observed``, which documents ask for
        each context (``Instance.args[0]``); under ``positions=depth:D``, its document."""
        found: dict[str, set[DocId]] = {}
        for req in requests if observed else ():
            if req.doc_id is not None:
                found.setdefault(req.args[0], set()).add((req.task_name, int(req.doc_id)))
        self._docs = {context: frozenset(docs) for context, docs in found.items()}
        try:
            with self.depth.serving(requests, "generate_until"):
                yield
        finally:
            self._docs, self._batch = {}, None

    def record(
        self, strings: Sequence[str], ids: torch.Tensor, whole: list[list[int]] | None
    ) -> None:
        """HFLM encoded ``strings`` as the batch ``ids`` ``[B, W]``; ``whole[b]``: the
        tokens of ``strings[b]`` before any truncation (under a chat template)."""
        self._batch = (list(strings), ids, whole)

    def take(
        self, context: torch.Tensor
    ) -> tuple[list[str], list[list[int]] | None, list[BlockSource] | None]:
        """The strings (and whole tokens, and under ``positions=depth:D`` their passage
        blocks) of the batch ``context`` HFLM generates now."""
        if self._batch is None or not torch.equal(self._batch[1].cpu(), context.cpu()):
            raise RuntimeError(
                "hf-posgen did not see this generation batch encoded (generate called "
                "outside HFLM.generate_until?); it cannot tell its contexts' strings"
            )
        strings, _, whole = self._batch
        return strings, whole, self.depth.generation_rows(strings, whole)

    def docs(self, strings: Sequence[str]) -> list[frozenset[DocId]]:
        """The documents of each context of a batch (none for an unknown one)."""
        return [self._docs.get(s, NO_DOCS) for s in strings]
