"""Generation (lm-eval's ``generate_until``) under a model-side perturbation.

lm-eval's ``HFLM.generate_until`` (0.4.13) left-pads each batch of contexts and calls
transformers' ``generate`` with their attention mask, so transformers (5.x) hands the
rotary embedding each row's count of real tokens: ``[B, W]`` in the prefill (row b's
real tokens at 0..n_b−1, its padding at 0), then ``[B, 1]`` per decode step (n_b + k for
the k-th generated token), and caches keys after RoPE. :func:`plan_generation` plans a
whole ``generate`` call once; :func:`generating` follows it step by step:

- **The context** gets exactly the positions, rope noise and qk noise of a log-likelihood
  request with the same context tokens: the plan is :func:`posgen.harness.model_side.door.plan_forward`
  over each row's real tokens, keyed on them alone (one draw per context at any batch
  size, padding or order; under a chat template its content only, :mod:`.chat_content`).
- **Generated tokens** continue at natural positions after the context: the k-th
  generated token (k = 0, 1, ...) of a row with n_b context tokens is at position n_b + k,
  where a log-likelihood continuation is (a scheme that moves the whole frame, ``shift``,
  ``scale`` or the length scheme ``scale:F``, moves them with it, as it moves a
  continuation). Their queries and keys get no noise, as a continuation's do not.
- **Every decode step** sees the context as the prefill perturbed it: keys are cached after
  RoPE, so planned positions, rope noise and ``layers=`` hold; qk noise acts inside
  attention, after the cache, so posgen keeps each acting layer's perturbed prompt keys
  beside the model's cache and hands them to attention at every step (the noise of a
  context token is drawn once, per token, never per step); with ``heads=`` and moved
  positions it keeps the perturbed twin keys of every column.

Refused in one line (:func:`check_generation`, :class:`GenerationRefused`) as
``generate_until`` starts, before any of its requests runs: the length schemes that
replace attention (Λ, InfLLM), ``logits=``, chunked prefill, and ``heads=`` with moved
positions under beam search.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any, NamedTuple

import numpy as np
import torch

from posgen.harness.hf_posgen.batch_rows import NO_DOCS, BlockSource, PaddedRows, truncated
from posgen.harness.hf_posgen.generation_rows import left_padded_lengths
from posgen.harness.model_side import door
from posgen.harness.model_side.attention.qk_noise import mix_heads, perturb, twin_rotation
from posgen.harness.model_side.family import family_of, require_rotary, rotary_modules
from posgen.harness.model_side.perturbation import ModelPerturbation
from posgen.harness.model_side.positions.non_rotary import generation_source
from posgen.harness.model_side.positions.plan import BatchPlan
from posgen.perturbations.base import PerturbationError, registry
from posgen.perturbations.depth import PassageBlocks


class GenerationRefused(PerturbationError, NotImplementedError):
    """What generation under a model-side perturbation does not run: a refusal in one line
    (the ``lm_eval`` command ends with it and exit status 2, as for bad model arguments),
    and the ``NotImplementedError`` it is."""


def generating_length_forms() -> list[str]:
    """The length schemes generation runs under (those that do not replace the attention
    function), in their written forms: ``none``, ``scale:FACTOR``, ..."""
    schemes = (cls for cls in registry if cls.kind == "length")
    forms = [cls.usage() for cls in schemes if not cls().uses_attention]
    return sorted(forms, key=lambda form: form != "none")  # none first


def check_generation(p: ModelPerturbation, generation_kwargs: dict[str, Any]) -> None:
    """Refuse what generation under ``p`` does not run (:class:`GenerationRefused`),
    before any forward."""
    if p.length is not None and p.length.uses_attention:
        raise GenerationRefused(
            f"generate_until under length={p.length.to_string()}: hf-posgen does not run it, "
            "its attention (Λ, InfLLM) re-rotates the keys beyond its window for every query, "
            "which a KV cache of rotated keys cannot give; generation runs under length="
            f"{', '.join(generating_length_forms())}: run this scheme on loglikelihood tasks "
            "(or posgen length), or a generative task under one of those"
        )
    if p.logits is not None:
        raise GenerationRefused(
            f"generate_until under logits={p.logits.to_string()}: hf-posgen does not run it, the "
            "fit replaces the logits of whole forwards, which a KV cache's decode steps are "
            "not; use loglikelihood tasks or posgen cause for it"
        )
    if generation_kwargs.get("prefill_chunk_size"):
        raise GenerationRefused(
            "hf-posgen plans the prompt as one prefill forward; drop prefill_chunk_size"
        )
    beams = int(generation_kwargs.get("num_beams") or 1)
    if beams > 1 and p.heads is not None and p.positions is not None:
        raise GenerationRefused(
            "heads= with positions= keeps perturbed keys per beam, which beam search "
            "reorders; generate with num_beams=1 (greedy or sampling)"
        )


def plan_generation(
    p: ModelPerturbation,
    context: torch.Tensor,
    mask: torch.Tensor | None,
    max_length: int,
    content: Sequence[np.ndarray] | None = None,
    encoded: Sequence[Sequence[int]] | None = None,
    blocks: Sequence[BlockSource] | None = None,
) -> GenerationPlan:
    """The plan of one ``generate(input_ids=context, attention_mask=mask,
    max_length=max_length)`` call under ``p`` (``context`` ``[B, W]``, left-padded).
    Under a chat template ``content[b]`` is the content mask over ``encoded[b]``, the
    whole tokens of row b's context string; under ``positions=depth:D`` ``blocks[b]``
    its passage blocks over them. HFLM may have cut the row from the left."""
    lengths = left_padded_lengths(context, mask)
    masks = cut = None
    if encoded is not None and (content is not None or blocks is not None):
        ids = context.detach().to("cpu", torch.int64)
        for b, n in enumerate(lengths):
            whole = list(encoded[b])
            if len(whole) < n or whole[len(whole) - n :] != ids[b, ids.shape[1] - n :].tolist():
                raise RuntimeError(
                    f"row {b} of the generation batch is not the end of its context's own "
                    "tokens; hf-posgen cannot place its chat template's content or passages"
                )
        if content is not None:
            masks = [np.asarray(content[b])[len(encoded[b]) - n :] for b, n in enumerate(lengths)]
        if blocks is not None:
            cut = [truncated(blocks[b], n) for b, n in enumerate(lengths)]
    return GenerationPlan(p, context, lengths, max_length - context.shape[1], masks, cut)


class Step(NamedTuple):
    """The forward running now: it covers columns ``[start, start + width)`` of the
    left-padded sequence, and each context fills ``expand`` rows (beams, samples)."""

    start: int
    width: int
    expand: int


class GenerationPlan:
    """One ``generate`` call's plan: per row of the left-padded batch ``[B, W]``, its
    ``lengths[b]`` real context tokens (the last ones) and ``content[b]`` (None: all of
    them); for G planned new tokens, ``natural`` ``[B, W + G]`` (what transformers gives
    the rotary embedding: ``c − (W − n_b)`` at a real column c, 0 on padding), ``table``
    ``[B, W + G]`` (the planned positions, None when unchanged; column ``W − n_b + t``
    holds the log-likelihood row's ``p_b[t]``) and ``columns``, the qk plan with each
    row's perturbed tokens at their columns. G grows when a step needs more."""

    def __init__(
        self,
        p: ModelPerturbation,
        context: torch.Tensor,
        lengths: Sequence[int],
        new_tokens: int,
        content: Sequence[np.ndarray | None] | None = None,
        blocks: Sequence[PassageBlocks] | None = None,
    ) -> None:
        self.p = p
        self.blocks = None if blocks is None else list(blocks)
        self.ids = context.detach().to("cpu", torch.int64).numpy()
        self.lengths = tuple(int(n) for n in lengths)
        self.width = int(self.ids.shape[1])
        self.content = list(content) if content is not None else [None] * len(self.lengths)
        self.step: Step | None = None
        self._build(max(int(new_tokens), 1))

    def _build(self, new_tokens: int) -> None:
        """Plan the contexts followed by ``new_tokens`` generated tokens: ``plan_forward``
        over right-aligned rows of context + placeholder tokens (a continuation's ids never
        enter a draw), moved to the left-padded columns."""
        batch, width = len(self.lengths), self.width
        right = np.zeros((batch, max(self.lengths) + new_tokens), dtype=np.int64)
        for b, n in enumerate(self.lengths):
            right[b, :n] = self.ids[b, width - n :]
        total = [n + new_tokens for n in self.lengths]
        rows = PaddedRows(total, list(self.lengths), [NO_DOCS] * batch, self.content, self.blocks)
        base = door.plan_forward(torch.from_numpy(right), self.p, rows)
        self._right, self._base = right, base
        columns = width + new_tokens
        natural = torch.zeros((batch, columns), dtype=torch.int64)
        table = None if base.positions is None else natural.to(base.positions.dtype, copy=True)
        for b, n in enumerate(self.lengths):
            natural[b, width - n :] = torch.arange(n + new_tokens)
            if table is not None:
                table[b, width - n :] = base.positions[b, : n + new_tokens]
        self.natural, self.table = natural, table
        slots = tuple(width - n + base.perturbed(b) for b, n in enumerate(self.lengths))
        self.columns = dataclasses.replace(
            base, lengths=(columns,) * batch, positions=table, slots=slots
        )
        self._on_device: dict[torch.device, torch.Tensor] = {}
        self._expanded: dict[int, BatchPlan] = {}

    def context_rows(self) -> tuple[torch.Tensor, BatchPlan]:
        """The contexts right-aligned ``[B, n_max + G]`` (placeholders after each) and
        their plan: what a log-likelihood batch of these contexts would be planned as."""
        return torch.from_numpy(self._right), self._base

    def follow(self, module: torch.nn.Module, given: torch.Tensor) -> Step:
        """Record the step a rotary call belongs to from the ``position_ids`` transformers
        gave it ``[rows, T]``, after checking they are each row's count of real tokens."""
        rows, width = given.shape
        batch = len(self.lengths)
        if rows % batch:
            raise RuntimeError(f"{type(module).__name__} got {rows} rows for {batch} contexts")
        last = int(given[0, -1])
        start = self.width - self.lengths[0] + last - (width - 1)
        if start + width > self.natural.shape[1]:
            self._build(2 * (start + width - self.width))
        expand = rows // batch
        expected = self.natural[:, max(start, 0) : start + width].repeat_interleave(expand, 0)
        if start < 0 or not torch.equal(given.detach().cpu(), expected):
            raise RuntimeError(
                f"{type(module).__name__} got position_ids {given.tolist()} in a generate "
                "call, not each row's count of real tokens; hf-posgen plans generation for "
                "transformers' positions from the attention mask of left-padded contexts"
            )
        if start < self.width and (start, width) != (0, self.width):
            raise RuntimeError("hf-posgen plans the prompt as one prefill forward (no chunks)")
        self.step = Step(start, width, expand)
        return self.step

    def positions(self, module: torch.nn.Module, given: torch.Tensor) -> torch.Tensor:
        """The planned positions of the current step's columns (a ``PositionSource``)."""
        start, width, expand = self.current()
        table = self._on_device.get(given.device)
        if table is None:
            table = self._on_device[given.device] = self.table.to(given.device)
        out = table[:, start : start + width]
        return out if expand == 1 else out.repeat_interleave(expand, 0)

    def columns_plan(self) -> BatchPlan:
        """The qk plan over the columns of every row as the current step's batch holds
        them (each context repeated ``expand`` times): perturbed tokens at their columns."""
        expand = self.current().expand
        plan = self._expanded.get(expand)
        if plan is None:
            c = self.columns

            def rep(values: tuple) -> tuple:
                return tuple(v for v in values for _ in range(expand))

            plan = dataclasses.replace(
                c, lengths=rep(c.lengths), spans=rep(c.spans), keys=rep(c.keys), slots=rep(c.slots)
            )
            self._expanded[expand] = plan
        return plan

    def current(self) -> Step:
        """The step running now."""
        if self.step is None:
            raise RuntimeError("no generation step is running (no rotary call yet)")
        return self.step


class GenerationAttention:
    """Every layer's attention in a ``generate`` call under qk schemes or ``heads=``: the
    context's queries and keys perturbed in the prefill as in one full forward, and at
    each decode step the context's perturbed keys again (kept here per layer)."""

    def __init__(self, plan: GenerationPlan) -> None:
        self.plan = plan
        self.keys: dict[int, torch.Tensor] = {}  # layer -> perturbed keys of columns [0, n)

    def __call__(self, run, module, query, key, value, mask, **kwargs) -> Any:
        layer = int(module.layer_idx)
        cols = self.plan.columns_plan()
        if not cols.acts_in(layer):
            return run(module, query, key, value, mask, **kwargs)
        start, width, _ = self.plan.current()
        new = key[:, :, -width:]  # this step's keys [B, H, T, d]; key holds [B, H, K, d]
        q, k_new = twin_rotation(cols, layer, query, new) if cols.heads else (query, new)
        if start == 0:  # the prefill: the context's columns are here
            q, k_new = perturb(q, cols, layer, "query"), perturb(k_new, cols, layer, "key")
        every_column = cols.heads is not None and cols.positions is not None
        k = self._perturbed_keys(layer, key, k_new, start, every_column)
        if cols.heads:
            return mix_heads(run, module, (query, key), (q, k), value, mask, cols.heads, **kwargs)
        return run(module, q, k, value, mask, **kwargs)

    def _perturbed_keys(
        self, layer: int, key: torch.Tensor, k_new: torch.Tensor, start: int, every_column: bool
    ) -> torch.Tensor:
        """``key`` (columns ``[end − K, end)``) with the kept perturbed keys in place: the
        prompt's columns, or with ``every_column`` every column (this step's appended)."""
        end = start + k_new.shape[2]
        kept = self.keys.get(layer)
        if start == 0:
            kept = k_new
        elif every_column:
            if kept is None or kept.shape[2] != start:
                raise RuntimeError(f"layer {layer}: perturbed keys out of step at column {start}")
            kept = torch.cat([kept, k_new], dim=2)
        self.keys[layer] = kept
        low, have = end - key.shape[2], kept.shape[2]
        if have >= end:
            return kept[:, :, low:end]
        if low >= have:
            return key
        out = key.clone()
        out[:, :, : have - low] = kept[:, :, low:]
        return out


@contextmanager
def generating(model: torch.nn.Module, plan: GenerationPlan) -> Iterator[None]:
    """Within the block, ``model.generate`` runs under ``plan.p`` as ``plan`` planned it,
    through the door (:func:`posgen.harness.model_side.door.forward` with the call's
    :class:`~posgen.harness.model_side.door.Steps`): every rotary call records its step
    (:meth:`GenerationPlan.follow`), then the planned positions, qk schemes and ``heads=``
    act. A non-rotary model follows its steps where its positions enter
    (:func:`posgen.harness.model_side.positions.non_rotary.generation_source`)."""
    p = plan.p
    if family_of(model).kind != "rotary":  # absolute or ALiBi: no rotary call
        with door.forward(model, p, door.Steps(generation_source(model, plan), None)):
            yield
        return
    modules = rotary_modules(model)
    if not modules:
        require_rotary(model, "generation under a perturbation")

    def pre_hook(module: torch.nn.Module, args: tuple, kwargs: dict) -> None:
        plan.follow(module, kwargs["position_ids"] if "position_ids" in kwargs else args[1])

    with ExitStack() as stack:
        handles = [m.register_forward_pre_hook(pre_hook, with_kwargs=True) for m in modules]
        stack.callback(lambda: [h.remove() for h in handles])
        attend = GenerationAttention(plan) if plan.columns.qk or p.heads is not None else None
        positions = plan.positions if plan.table is not None else None
        stack.enter_context(door.forward(model, p, door.Steps(positions, attend)))
        yield
