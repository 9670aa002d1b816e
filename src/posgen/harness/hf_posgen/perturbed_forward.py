"""One forward under a model-side perturbation: its plan and the hooks that carry it.

:func:`plan_forward` plans a batch (:func:`.position_hooks.build_plan`: per row, the
positions and noise drawn from its real tokens); :func:`perturbed_forward` puts every
part of the perturbation on the model for the forwards run inside the block, and takes
it off on exit, whatever happens:

- Λ or InfLLM attention for a length scheme that needs it (:mod:`posgen.harness.model_side.attention.length`);
- the planned positions where a non-rotary model's positions enter (its absolute
  position table or its ALiBi bias, :mod:`posgen.harness.model_side.positions.non_rotary`);
- the planned positions in every layer's rotary embedding (:mod:`.position_hooks`), or
  in the chosen layers only (``layers=``, :mod:`posgen.harness.model_side.positions.layers`; ``heads=`` keeps each
  chosen layer's own angles and mixes per head);
- qk noise, and the per-head mix, through posgen's attention function (:mod:`posgen.harness.model_side.attention.qk_noise`);
- ``logits=``: the chosen layers' and heads' logits replaced by their additive fit
  through posgen's attention function (:mod:`posgen.harness.model_side.logits.replacement`);
- with ``layers=`` and a :class:`posgen.harness.model_side.prefix_reuse.PrefixReuse`, the layers below the first
  perturbed one hand back the plain forward's recorded outputs.

``hf-posgen``'s ``_model_call`` runs each loglikelihood batch this way; any other path
that runs the model (with a plan for its own tokens) enters the same block. Generation
(:mod:`.generation`) puts the same parts on the model through
:func:`enter_perturbation`, with positions and attention planned per decode step.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import torch

from posgen.harness.hf_posgen.batch_rows import PaddedRows
from posgen.harness.model_side.attention import qk_noise
from posgen.harness.model_side.attention.length import length_attention
from posgen.harness.model_side.logits.forms import LogitDonor
from posgen.harness.model_side.logits.replacement import LogitReplacement, logits_replaced
from posgen.harness.model_side.perturbation import ModelPerturbation
from posgen.harness.model_side.positions.layers import layer_positions
from posgen.harness.model_side.positions.non_rotary import family_positions
from posgen.harness.model_side.positions.plan import BatchPlan, build_plan
from posgen.harness.model_side.positions.rotary import PositionSource, rotary_positions
from posgen.harness.model_side.prefix_reuse import PrefixReuse
from posgen.harness.position_family import position_family_of
from posgen.perturbations.length import combined_positions


def plan_forward(inps: torch.Tensor, p: ModelPerturbation, rows: PaddedRows) -> BatchPlan:
    """The plan of one forward of ``inps`` ``[B, T]`` under ``p``: row b has
    ``rows.lengths[b]`` real tokens, of which the first ``rows.contexts[b]`` (narrowed to
    ``rows.content[b]``) are perturbed; position schemes combined with the length scheme
    (``positions / F``), then the feature scheme; restricted to ``p.layers``/``p.heads``."""
    moved = combined_positions(p.positions, p.length)
    plan = build_plan(inps, rows.lengths, (moved, p.features), p.seed, rows.contexts, rows.content)
    return dataclasses.replace(plan, layers=p.layers, heads=p.heads)


@contextmanager
def perturbed_forward(
    model: torch.nn.Module,
    p: ModelPerturbation,
    plan: BatchPlan,
    reuse: PrefixReuse | None = None,
    inps: torch.Tensor | None = None,
    donor: LogitDonor | None = None,
) -> Iterator[None]:
    """Within the block, forwards of ``model`` run under ``p`` as ``plan`` planned them
    (see the module doc); ``reuse`` replays the plain layers below ``p.layers[0]`` for
    the batch ``inps`` when it recorded it; ``donor`` serves ``logits=foreign``."""
    with ExitStack() as stack:
        if p.logits is not None:  # logits replaced by their fit: no qk noise beside them
            enter_perturbation(stack, model, p, plan.positions, None)
            replacement = LogitReplacement(
                p.logits, p.layers, p.heads, p.seed, plan.keys, plan.lengths, donor
            )
            stack.enter_context(logits_replaced(model, replacement))
        else:
            mixed = p.heads is not None and position_family_of(model).kind == "rotary"
            attend = qk_noise.plan_attention(plan) if plan.qk or mixed else None
            enter_perturbation(stack, model, p, plan.positions, attend, plan.lengths)
        if reuse is not None and p.layers is not None and inps is not None:
            stack.enter_context(reuse.replay(inps, p.layers[0]))
        yield


def enter_perturbation(
    stack: ExitStack,
    model: torch.nn.Module,
    p: ModelPerturbation,
    positions: torch.Tensor | PositionSource | None,
    attend: qk_noise.Attend | None,
    lengths: tuple[int, ...] | None = None,
) -> None:
    """Put ``p`` on ``model`` until ``stack`` closes: Λ attention for a length scheme
    that needs it, ``positions`` (a tensor or a per-call source; None: positions
    unchanged) in every rotary embedding or in ``p.layers`` only (``heads=``: as twin
    rotations), and ``attend`` (None: none) as every layer's attention. ``lengths``: the
    rows' real lengths (right padding), which InfLLM's retrieval needs."""
    if p.length is not None and p.length.uses_attention:
        stack.enter_context(length_attention(model, p.length, lengths=lengths))
    split = p.heads is not None
    if positions is not None and position_family_of(model).kind != "rotary":
        stack.enter_context(family_positions(model, positions, p.layers, p.heads))
    elif positions is not None and p.layers is not None:
        stack.enter_context(layer_positions(model, positions, p.layers, split))
    elif positions is not None:
        stack.enter_context(rotary_positions(model, positions))
    if attend is not None:
        stack.enter_context(qk_noise.attention_active(model, attend))
