"""The one door onto the model: every forward of every command and of ``hf-posgen`` runs
inside :func:`forward`, which puts the run's model-side perturbation on the model for the
forwards of the block and takes it off on exit, whatever happens. A plain forward enters
it with no perturbation; :func:`inside` says whether the calling code runs inside it.

:func:`plan_forward` plans one forward: a batch of right-padded rows (``hf-posgen``'s
loglikelihood batches, a generate call's contexts) or one unpadded document (``posgen
length``, ``posgen decompose --length``), per row the positions and noise drawn from its
real tokens (:func:`.positions.plan.build_plan`). :func:`forward` then enters the rooms:

- Λ or InfLLM attention for a length scheme that needs it (:mod:`.attention.length`);
- the planned positions where the model's positions enter: every layer's rotary
  embedding (:mod:`.positions.rotary`), or the chosen layers only (``layers=``,
  :mod:`.positions.layers`; ``heads=`` keeps each chosen layer's own angles and mixes per
  head), or a learned position table or an ALiBi bias (:mod:`.positions.non_rotary`);
- qk noise, and the per-head mix, through posgen's attention function
  (:mod:`.attention.qk_noise`);
- ``logits=``: the chosen layers' and heads' logits replaced by their additive fit
  (:mod:`.logits.replacement`);
- with ``layers=`` and a :class:`.prefix_reuse.PrefixReuse`, the layers below the first
  perturbed one hand back the plain forward's recorded outputs.

A ``generate`` call enters it once with its per-step entry (:class:`Steps`: the positions
each rotary call reads for its step and the attention of every step), planned by
:mod:`posgen.harness.hf_posgen.generation`. The capture of the logits
(:func:`.logits.capture.capture_forward`) runs its forward inside the door too.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar
from typing import Any, NamedTuple, Protocol

import numpy as np
import torch

from posgen.harness.model_side.attention import qk_noise
from posgen.harness.model_side.attention.length import length_attention
from posgen.harness.model_side.family import family_of
from posgen.harness.model_side.logits.forms import LogitDonor
from posgen.harness.model_side.logits.replacement import LogitReplacement, logits_replaced
from posgen.harness.model_side.perturbation import ModelPerturbation
from posgen.harness.model_side.positions.layers import layer_positions
from posgen.harness.model_side.positions.non_rotary import family_positions
from posgen.harness.model_side.positions.plan import BatchPlan, build_plan
from posgen.harness.model_side.positions.rotary import PositionSource, rotary_positions
from posgen.harness.model_side.prefix_reuse import PrefixReuse
from posgen.perturbations.depth import PassageBlocks
from posgen.perturbations.length import LengthPerturbation, combined_positions

_DEPTH: ContextVar[int] = ContextVar("posgen_door_depth", default=0)


def inside() -> bool:
    """Does the calling code run inside :func:`forward` (at any depth)?"""
    return _DEPTH.get() > 0


class Rows(Protocol):
    """The rows of one padded batch (``hf-posgen``'s
    :class:`~posgen.harness.hf_posgen.batch_rows.PaddedRows`): per row its real length, how
    many leading tokens are its context, which of them are content (None: all) and its
    context's passage blocks (``positions=depth:D``; None: not known)."""

    lengths: Sequence[int]
    contexts: Sequence[int]
    content: Sequence[np.ndarray | None]
    blocks: Sequence[PassageBlocks | None] | None


class Steps(NamedTuple):
    """A ``generate`` call's per-step entry: ``positions``, a source each rotary call (or
    each block of a non-rotary model) reads its step's positions from (None: unchanged),
    and ``attend``, the attention of every step (None: the model's own)."""

    positions: torch.Tensor | PositionSource | None
    attend: qk_noise.Attend | None


def plan_forward(
    inps: torch.Tensor,
    p: ModelPerturbation,
    rows: Rows | None = None,
    model: torch.nn.Module | None = None,
) -> BatchPlan:
    """The plan of one forward of ``inps`` ``[B, T]`` under ``p``: row b has
    ``rows.lengths[b]`` real tokens, of which the first ``rows.contexts[b]`` (narrowed to
    ``rows.content[b]``; their passage blocks ``rows.blocks[b]``) are perturbed; position schemes combined with the length scheme
    (``positions / F``), then the feature scheme; restricted to ``p.layers``/``p.heads``.

    ``rows`` None: ``inps`` is one unpadded document ``[1, n]``, all of it perturbed, and
    ``model`` (required then) must have been loaded with the rope scaling ``p.length``
    needs (:func:`check_loaded`)."""
    if rows is None:
        if inps.dim() != 2 or inps.shape[0] != 1:
            raise ValueError(f"one document at a time: input_ids [1, n], got {tuple(inps.shape)}")
        if model is None:
            raise ValueError("the plan of a document checks its model: pass model=")
        if p.length is not None:
            check_loaded(model, p.length)
    lengths = [int(inps.shape[1])] if rows is None else rows.lengths
    spans, content = (None, None) if rows is None else (rows.contexts, rows.content)
    blocks = None if rows is None else getattr(rows, "blocks", None)
    moved = combined_positions(p.positions, p.length)
    plan = build_plan(inps, lengths, (moved, p.features), p.seed, spans, content, blocks)
    return dataclasses.replace(plan, layers=p.layers, heads=p.heads)


def check_loaded(model: Any, length: LengthPerturbation) -> None:
    """Refuse a model that was not loaded with the rope scaling the scheme needs (rope
    scalings, ``dynamic`` and ``yarn``, apply when the model loads:
    :func:`posgen.harness.loading.load_model` passes their ``rope_parameters`` to
    ``from_pretrained``; editing a built model's config does nothing)."""
    have = dict(getattr(model.config, "rope_parameters", None) or {})
    if length.rope_type is None:
        if have.get("rope_type", "default") in ("dynamic", "yarn"):
            raise RuntimeError(
                f"length={length.to_string()} runs the model as trained, but it was loaded "
                f"with rope scaling {have}"
            )
        return
    factor = float(getattr(length, "factor", 0.0))
    if have.get("rope_type") != length.rope_type or have.get("factor") != factor:
        raise RuntimeError(
            f"length={length.to_string()} is applied at load time, but this model was loaded "
            f"with rope_parameters={have}; load it with posgen.harness.loading.load_model(entry, length=scheme)"
        )


@contextmanager
def forward(
    model: torch.nn.Module,
    p: ModelPerturbation | None = None,
    plan: BatchPlan | Steps | None = None,
    *,
    reuse: PrefixReuse | None = None,
    inps: torch.Tensor | None = None,
    donor: LogitDonor | None = None,
    block_size: int | None = None,
) -> Iterator[None]:
    """Within the block, forwards of ``model`` run under ``p`` as ``plan`` planned them
    (:func:`plan_forward`; a generate call: its :class:`Steps`), or plain without ``p``
    (see the module doc). ``reuse`` replays the plain layers below ``p.layers[0]`` for
    the batch ``inps`` when it recorded it; ``donor`` serves ``logits=foreign``;
    ``block_size``: Λ's query block (None: its default)."""
    token = _DEPTH.set(_DEPTH.get() + 1)
    try:
        with ExitStack() as stack:
            if p is not None:
                _enter(stack, model, p, plan, reuse, inps, donor, block_size)
            yield
    finally:
        _DEPTH.reset(token)


def _enter(stack, model, p, plan, reuse, inps, donor, block_size) -> None:
    """Put ``p`` on ``model`` as ``plan`` (a :class:`BatchPlan` or :class:`Steps`) planned
    it, until ``stack`` closes."""
    if isinstance(plan, Steps):
        _enter_parts(stack, model, p, plan.positions, plan.attend)
        return
    if plan is None:
        raise ValueError("a model-side perturbation enters the door with its plan")
    if p.logits is not None:  # logits replaced by their fit: no qk noise beside them
        _enter_parts(stack, model, p, plan.positions, None, block_size=block_size)
        replacement = LogitReplacement(
            p.logits, p.layers, p.heads, p.seed, plan.keys, plan.lengths, donor
        )
        stack.enter_context(logits_replaced(model, replacement))
    else:
        mixed = p.heads is not None and family_of(model).kind == "rotary"
        attend = qk_noise.plan_attention(plan) if plan.qk or mixed else None
        _enter_parts(stack, model, p, plan.positions, attend, plan.lengths, block_size)
    if reuse is not None and p.layers is not None and inps is not None:
        stack.enter_context(reuse.replay(inps, p.layers[0]))


def _enter_parts(
    stack: ExitStack,
    model: torch.nn.Module,
    p: ModelPerturbation,
    positions: torch.Tensor | PositionSource | None,
    attend: qk_noise.Attend | None,
    lengths: tuple[int, ...] | None = None,
    block_size: int | None = None,
) -> None:
    """Put ``p`` on ``model`` until ``stack`` closes: Λ or InfLLM attention for a length
    scheme that needs it, ``positions`` (a tensor or a per-call source; None: positions
    unchanged) where the model's positions enter, in every rotary embedding or in
    ``p.layers`` only (``heads=``: as twin rotations), and ``attend`` (None: none) as
    every layer's attention. ``lengths``: the rows' real lengths (right padding), which
    InfLLM's retrieval needs."""
    if p.length is not None and p.length.uses_attention:
        stack.enter_context(length_attention(model, p.length, block_size, lengths))
    split = p.heads is not None
    if positions is not None and family_of(model).kind != "rotary":
        stack.enter_context(family_positions(model, positions, p.layers, p.heads))
    elif positions is not None and p.layers is not None:
        stack.enter_context(layer_positions(model, positions, p.layers, split))
    elif positions is not None:
        stack.enter_context(rotary_positions(model, positions))
    if attend is not None:
        stack.enter_context(qk_noise.attention_active(model, attend))
