"""Where position perturbations enter a Hugging Face model: inside its rotary embedding.

Passing custom ``position_ids`` to the model's forward is a trap in transformers 5.x: with
``attention_mask=None`` any step other than +1 is read as the start of a new packed
sequence and the causal mask is rebuilt from it. posgen instead leaves the model's inputs
and masks alone and changes only what the rotary embedding module sees: a forward
pre-hook replaces its ``position_ids`` argument by the perturbed positions. For identity
positions the module computes exactly the same (cos, sin), so logits are bit-identical.

Only the rotary angles move: masks are built from token order, so Gemma2/Gemma3
sliding-window layers still attend to the ``sliding_window`` most recent tokens in input
order whatever positions they are given (the tokens themselves never move).

Everything about one forward is prepared up front in a :class:`BatchPlan` from the
batch's real tokens (right padding excluded), so each sequence gets the same positions
and noise at any batch size. Only the first ``spans[b]`` real tokens of row b are
perturbed, keyed on those tokens alone: the context of a log-likelihood request (every
answer choice then sees the same perturbed context, and the continuation keeps its
positions), the whole window in rolling perplexity.

Under a chat template only the content tokens of the context are perturbed
(:mod:`.chat_content`): each scheme draws over the content tokens as one sequence, keyed
on them. A reordering (a permutation of the content's indices) makes the content tokens
trade the positions of the content slots among themselves; any other scheme's offsets
(a shift, a scale, rope noise) are added at the content tokens. The template's tokens
keep their positions, and ``qk`` schemes perturb the content tokens' queries and keys only.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from posgen.harness.model_family import require_rotary, rotary_modules
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
) -> BatchPlan:
    """Plan one forward of ``input_ids`` ``[B, T]`` whose row b has ``lengths[b]`` real
    tokens followed by padding, of which the first ``spans[b]`` (default: all) are perturbed
    by ``schemes`` (None and identity entries are skipped); ``content[b]``, a boolean mask
    over those ``spans[b]`` tokens, narrows them to its True tokens (None: all).

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
    masks = [None] * batch if content is None else list(content)
    if len(masks) != batch or any(
        m is not None and np.shape(m) != (s,) for m, s in zip(masks, spans, strict=True)
    ):
        raise ValueError(f"content masks do not fit the spans {spans}")
    slots = tuple(None if m is None else np.flatnonzero(m) for m in masks)
    rows = [ids[b, :n] for b, n in enumerate(lengths)]
    keys = tuple(token_key(r[:s]) for r, s in zip(rows, spans, strict=True))
    moving = [s for s in active if s.where == "positions"]
    table = _position_table(rows, spans, slots, width, moving, seed) if moving else None
    qk = tuple(s for s in active if s.where == "qk")
    return BatchPlan(
        tuple(int(n) for n in lengths),
        tuple(int(s) for s in spans),
        keys,
        table,
        qk,
        int(seed),
        slots if any(s is not None for s in slots) else (),
    )


def _position_table(
    rows: list[np.ndarray],
    spans: list[int],
    slots: Sequence[np.ndarray | None],
    width: int,
    schemes: list[ModelSidePerturbation],
    seed: int,
) -> torch.Tensor:
    """Position values ``[B, T]``: long when every value is an integer, else float32."""
    table = np.tile(np.arange(width, dtype=np.float64), (len(rows), 1))
    integral = True
    for b, (row, span, idx) in enumerate(zip(rows, spans, slots, strict=True)):
        if idx is not None and not idx.size:
            continue  # no content token: nothing of the row moves
        for scheme in schemes:
            if idx is None:
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


#: ``source(module, given) -> positions``: the position values a rotary module computes its
#: (cos, sin) from in one call, given the ``position_ids`` the model passed it. A fixed
#: ``[B, T]`` tensor is the source of one full forward (:func:`position_source`); a
#: generation plan gives each decode step its own columns (:mod:`.generation`).
PositionSource = Callable[[torch.nn.Module, torch.Tensor], torch.Tensor]


def position_source(positions: torch.Tensor | PositionSource) -> PositionSource:
    """``positions`` as a :data:`PositionSource`: a tensor ``[B, T]`` is checked against
    every call's ``position_ids`` (:func:`check_position_shape`) and copied once per
    device; a source is returned as it is."""
    if not isinstance(positions, torch.Tensor):
        return positions
    cache: dict[torch.device, torch.Tensor] = {}

    def source(module: torch.nn.Module, given: torch.Tensor) -> torch.Tensor:
        check_position_shape(module, given, positions)
        new = cache.get(given.device)
        if new is None:
            new = cache[given.device] = positions.to(given.device)
        return new

    return source


@contextmanager
def rotary_positions(
    model: torch.nn.Module, positions: torch.Tensor | PositionSource
) -> Iterator[None]:
    """Within the block, every rotary embedding of ``model`` computes its (cos, sin) from
    ``positions`` ``[B, T]`` (or what a :data:`PositionSource` gives for the call) instead
    of the ``position_ids`` the model passes (``[1, T]`` or ``[B, T]``, consecutive). The
    hooks are always removed on exit."""
    modules = rotary_modules(model)
    if not modules:
        require_rotary(model, "a position perturbation")
    source = position_source(positions)

    def pre_hook(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        in_kwargs = "position_ids" in kwargs
        new = source(module, kwargs["position_ids"] if in_kwargs else args[1])
        if in_kwargs:
            return args, {**kwargs, "position_ids": new}
        return (args[0], new, *args[2:]), kwargs

    handles = [m.register_forward_pre_hook(pre_hook, with_kwargs=True) for m in modules]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def check_position_shape(
    module: torch.nn.Module, given: torch.Tensor, positions: torch.Tensor
) -> None:
    """Refuse a rotary call whose ``position_ids`` do not fit the planned ``positions``."""
    if (
        given.dim() != 2
        or given.shape[-1] != positions.shape[-1]
        or given.shape[0] not in (1, positions.shape[0])
    ):
        raise RuntimeError(
            f"{type(module).__name__} got position_ids of shape {tuple(given.shape)}, but "
            f"posgen planned positions for a batch of shape {tuple(positions.shape)}; "
            "a batch plan covers one full forward (generation with a KV cache plans each "
            "step through hf-posgen's generate_until)"
        )
