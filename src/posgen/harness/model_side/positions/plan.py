"""The plan of one forward: per row, the positions and noise drawn from its real tokens.

Everything about one forward is prepared up front in a :class:`BatchPlan` from the
batch's real tokens (right padding excluded), so each sequence gets the same positions
and noise at any batch size. Only the first ``spans[b]`` real tokens of row b are
perturbed, keyed on those tokens alone: the context of a log-likelihood request (every
answer choice then sees the same perturbed context, and the continuation keeps its
positions), the whole window in rolling perplexity.

Under a chat template only the content tokens of the context are perturbed
(:mod:`posgen.harness.hf_posgen.chat_content`): each scheme draws over the content tokens
as one sequence, keyed on them. A reordering (a permutation of the content's indices)
makes the content tokens trade the positions of the content slots among themselves; any
other scheme's offsets (a shift, a scale, rope noise) are added at the content tokens.
The template's tokens keep their positions, and ``qk`` schemes perturb the content
tokens' queries and keys only.

A scheme that needs a document's passage blocks (``positions=depth:D``,
:class:`~posgen.perturbations.depth.PositionDepth`) takes its values from a per-row
source instead of a draw: ``blocks[b]``, the passage blocks of row b's context in its
tokens (found from the request's document, :mod:`posgen.harness.hf_posgen.depth_rows`);
a row without them is refused. Its tokens are addressed directly (a chat template's
tokens before the passages are the fixed prefix), and the plan records what each row
realised (``depth``).

The planned positions enter the model where its positions enter: the rotary embedding
(:mod:`.rotary`), chosen layers only (:mod:`.layers`), a learned table or an ALiBi bias
(:mod:`.non_rotary`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from posgen.perturbations.base import PerturbationError
from posgen.perturbations.depth import PassageBlocks
from posgen.perturbations.model_side import WHERE, ModelSidePerturbation
from posgen.perturbations.seeding import token_key


@dataclass(frozen=True)
class BatchPlan:
    """What one forward of a right-padded batch needs.

    - ``lengths``: real (unpadded) length of each row, ``[B]``.
    - ``spans``: how many leading real tokens of each row are perturbed, ``[B]``.
    - ``keys``: SHA-256 token key of each row's perturbed tokens, ``[B]``.
    - ``positions``: position values ``[B, T]`` for the rotary embedding (long, or float32
      when non-integer), or None when positions are not changed. Padding slots get t.
    - ``qk``: the schemes that act on queries and keys inside attention, in order.
    - ``slots``: per row, the indices of the perturbed tokens when they are not all of the
      first ``spans[b]`` (the content tokens under a chat template), else None.
    - ``layers``: the decoder layers the schemes act in (``layers=``), None for all.
    - ``depth``: per row, the realised evidence depth of a scheme planned from passage
      blocks (:meth:`~posgen.perturbations.depth.PositionDepth.realised`), else ().
    """

    lengths: tuple[int, ...]
    spans: tuple[int, ...]
    keys: tuple[bytes, ...]
    positions: torch.Tensor | None
    qk: tuple[ModelSidePerturbation, ...]
    seed: int
    slots: tuple[np.ndarray | None, ...] = ()
    layers: tuple[int, ...] | None = None  # the layers the schemes act in (None: all)
    heads: tuple[int, ...] | None = None  # query heads within those layers (None: all)
    depth: tuple[dict | None, ...] = ()  # per row, the realised evidence depth

    def acts_in(self, layer: int) -> bool:
        """Do the planned schemes act in decoder layer ``layer``?"""
        return self.layers is None or layer in self.layers

    def perturbed(self, b: int) -> np.ndarray:
        """Indices of the perturbed tokens of row b."""
        slots = self.slots[b] if self.slots else None
        return np.arange(self.spans[b]) if slots is None else slots


def build_plan(
    input_ids: torch.Tensor,
    lengths: Sequence[int],
    schemes: Sequence[ModelSidePerturbation | None],
    seed: int,
    spans: Sequence[int] | None = None,
    content: Sequence[np.ndarray | None] | None = None,
    blocks: Sequence[PassageBlocks | None] | None = None,
) -> BatchPlan:
    """Plan one forward of ``input_ids`` ``[B, T]`` whose row b has ``lengths[b]`` real
    tokens followed by padding, of which the first ``spans[b]`` (default: all) are perturbed
    by ``schemes`` (None and identity entries are skipped); ``content[b]``, a boolean mask
    over those ``spans[b]`` tokens, narrows them to its True tokens (None: all);
    ``blocks[b]``: the passage blocks of those tokens, for a scheme that needs them.

    Positions: ``p_b[t] = t + Σ_schemes draw(tokens of b, spans[b])[t]`` for the schemes
    acting on positions (see :mod:`posgen.perturbations.model_side`), and ``t`` on padding:
    causal attention never lets a real token see padding to its right, so those values
    cannot matter.
    """
    ids = input_ids.detach().to("cpu", torch.int64).numpy()
    batch, width = ids.shape
    if len(lengths) != batch or any(not 0 < n <= width for n in lengths):
        raise ValueError(f"lengths {list(lengths)} do not fit a batch of shape {ids.shape}")
    spans = list(lengths) if spans is None else list(spans)
    if len(spans) != batch or any(not 0 < s <= n for s, n in zip(spans, lengths, strict=True)):
        raise ValueError(f"spans {spans} do not fit the row lengths {list(lengths)}")
    active = [s for s in schemes if s is not None and not s.is_identity]
    for scheme in active:
        if scheme.where not in WHERE:
            raise ValueError(f"{scheme.name}: where={scheme.where!r}, expected one of {WHERE}")
    slots = _content_slots(content, spans)
    rows = [ids[b, :n] for b, n in enumerate(lengths)]
    keys = tuple(token_key(r[:s]) for r, s in zip(rows, spans, strict=True))
    moving = [s for s in active if s.where == "positions"]
    sources, depth = _block_sources(moving, spans, blocks)
    table = _position_table(rows, spans, slots, width, moving, seed, sources) if moving else None
    qk = tuple(s for s in active if s.where == "qk")
    return BatchPlan(
        tuple(int(n) for n in lengths),
        tuple(int(s) for s in spans),
        keys,
        table,
        qk,
        int(seed),
        slots if any(s is not None for s in slots) else (),
        depth=depth,
    )


def _content_slots(
    content: Sequence[np.ndarray | None] | None, spans: list[int]
) -> tuple[np.ndarray | None, ...]:
    """Each row's content tokens (None: all of its span) from its content mask."""
    masks = [None] * len(spans) if content is None else list(content)
    if len(masks) != len(spans) or any(
        m is not None and np.shape(m) != (s,) for m, s in zip(masks, spans, strict=True)
    ):
        raise ValueError(f"content masks do not fit the spans {spans}")
    return tuple(None if m is None else np.flatnonzero(m) for m in masks)


def _block_sources(
    schemes: list[ModelSidePerturbation],
    spans: list[int],
    blocks: Sequence[PassageBlocks | None] | None,
) -> tuple[list[PassageBlocks | None], tuple[dict | None, ...]]:
    """Each row's passage blocks when a scheme needs them (else Nones), refusing a row
    without them in one line (the scheme's own refusal: its field protocol), and the
    depth each row realises under it."""
    rows = [None] * len(spans) if blocks is None else list(blocks)
    if len(rows) != len(spans):
        raise ValueError(f"passage blocks for {len(rows)} rows, {len(spans)} in the batch")
    needing = [s for s in schemes if getattr(s, "needs_blocks", False)]
    if not needing:
        return rows, ()
    if any(b is None for b in rows):
        needing[0].values(0, None)  # refuses, naming what the row lacks
        raise PerturbationError(f"{needing[0].to_string()} needs each row's passage blocks")
    depth = needing[0]  # one position scheme per run
    return rows, tuple(depth.realised(b, n) for b, n in zip(rows, spans, strict=True))  # type: ignore[attr-defined]


def _position_table(
    rows: list[np.ndarray],
    spans: list[int],
    slots: Sequence[np.ndarray | None],
    width: int,
    schemes: list[ModelSidePerturbation],
    seed: int,
    blocks: Sequence[PassageBlocks | None],
) -> torch.Tensor:
    """Position values ``[B, T]``: long when every value is an integer, else float32."""
    table = np.tile(np.arange(width, dtype=np.float64), (len(rows), 1))
    integral = True
    for b, (row, span, idx) in enumerate(zip(rows, spans, slots, strict=True)):
        for scheme in schemes:
            if getattr(scheme, "needs_blocks", False):  # its own tokens, from the blocks
                offsets = scheme.row_offsets(blocks[b], span, row.size)  # type: ignore[attr-defined]
                table[b, : row.size] += offsets
            elif idx is not None and not idx.size:
                continue  # no content token: nothing of the row moves
            elif idx is None:
                offsets = scheme.draw(row, span, seed)
                table[b, : row.size] += offsets
            else:
                offsets = _slot_offsets(scheme, scheme.draw(row[idx], idx.size, seed), idx)
                table[b, idx] += offsets
            integral = integral and offsets.dtype.kind in "iu"
    if integral:
        return torch.from_numpy(table.astype(np.int64))
    return torch.from_numpy(table.astype(np.float32))


def _slot_offsets(
    scheme: ModelSidePerturbation, offsets: np.ndarray, idx: np.ndarray
) -> np.ndarray:
    """Row offsets at the tokens ``idx`` from ``scheme``'s offsets over them as one
    sequence: a reordering (a permutation of their indices) sends token j to the position
    of slot ``idx[π(j)]``; a feature scheme's per-token noise is added as it is. A scheme
    that moves the whole frame (``shift``, ``scale``) has no meaning on the content alone
    and is refused."""
    k = idx.size
    target = np.arange(k) + offsets
    if offsets.dtype.kind in "iu" and np.array_equal(np.sort(target), np.arange(k)):
        return idx[target] - idx
    if scheme.kind == "feature":
        return offsets
    raise ValueError(
        f"{scheme.to_string()} moves the whole frame of positions, which has no meaning on "
        "the content of a chat-templated prompt alone; run it without a chat template"
    )
