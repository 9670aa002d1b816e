"""Planned positions in the non-rotary position families (:mod:`posgen.harness.position_family`),
through the model's own code.

- **Learned absolute** (GPT-2, OPT): the position embedding's ``forward`` is replaced,
  within the block, by one that hands the model's own forward the planned ids instead of
  the ids the model passed (``[1, T]`` or ``[B, T]``). A fractional position p (rope
  noise, σ read in positions) reads the table between its rows:
  ``E(p) = (1 − f)·E(⌊p⌋) + f·E(⌊p⌋ + 1)``, f = p − ⌊p⌋, both rows looked up by the
  model's own forward; a fractional position outside the table's ``[0, C − 1]`` is held
  at its end row (the table has no row there), an integral one outside it is refused.
- **ALiBi** (BLOOM, MPT, Falcon with ``alibi=True``): a forward pre-hook on each chosen
  decoder block replaces the bias it is handed (BLOOM's ``alibi[b·H + h, 0, j] = m_h·j``:
  softmax is blind to the per-query constant, so this is ``−m_h·(i − j)``) by the bias of
  the planned positions, ``m_h·π_b(j)`` per row, in the model's own form and precision
  (:mod:`..alibi.rows`: MPT's one batch bias added per row, Falcon's bias and the mask it
  folds it into). Every block for all layers; the chosen ones for ``layers=``; ``heads=``
  keeps the model's own bias in the other heads.

Hooks and replaced forwards are always removed on exit. Identity perturbations never get
here (``ModelPerturbation.changes_model`` is False): they run the plain model.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager
from typing import Any

import torch

from posgen.compat import forward_replaced
from posgen.harness.model_side.alibi.rows import KeyPositions, bias_replacer
from posgen.harness.model_side.positions.rotary import PositionSource, position_source
from posgen.harness.position_family import PositionFamily, position_family_of
from posgen.perturbations.base import PerturbationError


@contextmanager
def family_positions(
    model: torch.nn.Module,
    positions: torch.Tensor | PositionSource | KeyPositions,
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
) -> Iterator[None]:
    """Within the block, ``model`` (absolute or ALiBi) sees ``positions`` ``[B, T]`` (or
    a source's, per call) where its positions enter; ALiBi: in ``layers`` and ``heads``
    only (None: all)."""
    family = position_family_of(model)
    if family.kind == "absolute":
        with absolute_positions(model, family, positions):  # type: ignore[arg-type]
            yield
    elif family.kind == "alibi" and family.bias_form and not family.refusal:
        source = positions if callable(positions) else full_forward_keys(positions)
        with alibi_positions(model, family, source, layers, heads):
            yield
    else:
        raise PerturbationError(f"{family.name}: no positions posgen can move in this model")


# ---------------------------------------------------------------- learned absolute
@contextmanager
def absolute_positions(
    model: torch.nn.Module, family: PositionFamily, positions: torch.Tensor | PositionSource
) -> Iterator[None]:
    """The absolute position table of ``model`` looked up at ``positions`` (see the
    module doc) within the block."""
    module = family.embedding_module(model)
    source = position_source(positions)
    own = module.forward  # the model's own (accelerate's hook included, if any)
    capacity = int(module.num_embeddings) - family.offset

    def forward(*args: Any, **kwargs: Any) -> torch.Tensor:
        given, rebuild = _ids_of(family, args, kwargs)
        new = source(module, given)

        def look(ids: torch.Tensor) -> torch.Tensor:
            a, k = rebuild(ids)
            return own(*a, **k)

        return interpolated_lookup(look, new, capacity)

    with forward_replaced(module, forward):
        yield


def interpolated_lookup(
    look: Callable[[torch.Tensor], torch.Tensor], positions: torch.Tensor, capacity: int
) -> torch.Tensor:
    """``look(ids)`` ``[B, T] -> [B, T, D]`` at ``positions`` ``[B, T]``: integral ones as
    they are (refused outside ``[0, capacity)``), fractional ones interpolated linearly
    between the two rows around them, held to ``[0, capacity − 1]``."""
    if not positions.is_floating_point():
        low, high = int(positions.min()), int(positions.max())
        if low < 0 or high >= capacity:
            raise PerturbationError(
                f"planned positions {low}..{high} leave the model's learned position table "
                f"(0..{capacity - 1}); a learned absolute model has no row there"
            )
        return look(positions)
    held = positions.clamp(0, capacity - 1)
    below = held.floor()
    frac = (held - below).unsqueeze(-1)
    base = below.long()
    a, b = look(base), look((base + 1).clamp(max=capacity - 1))
    return a + frac.to(a.dtype) * (b - a)


def _ids_of(
    family: PositionFamily, args: tuple, kwargs: dict
) -> tuple[torch.Tensor, Callable[[torch.Tensor], tuple[tuple, dict]]]:
    """The ids the model handed its position embedding, and how to hand it others."""
    name = family.ids_argument
    if kwargs.get(name) is not None:
        return kwargs[name], lambda ids: (args, {**kwargs, name: ids})
    if name == "input" and args:
        return args[0], lambda ids: ((ids, *args[1:]), kwargs)
    raise RuntimeError(
        f"{family.name}: its position embedding was called without {name}; posgen moves "
        "the ids the model hands it (tested with transformers 5.x)"
    )


# ---------------------------------------------------------------- ALiBi
def full_forward_keys(positions: torch.Tensor) -> KeyPositions:
    """The key positions of one full forward: ``positions`` ``[B, T]``, checked against
    the natural ones of every call (K = T = width, B rows)."""

    def source(natural: torch.Tensor, width: int) -> torch.Tensor:
        if natural.shape[-1] != positions.shape[-1] or width != positions.shape[-1]:
            raise RuntimeError(
                f"an ALiBi bias over {natural.shape[-1]} keys for {width} queries, but posgen "
                f"planned positions for a batch of shape {tuple(positions.shape)}; a batch "
                "plan covers one full forward (generation plans each step)"
            )
        return positions.to(natural.device)

    return source


@contextmanager
def alibi_positions(
    model: torch.nn.Module,
    family: PositionFamily,
    source: KeyPositions,
    layers: Sequence[int] | None = None,
    heads: Sequence[int] | None = None,
) -> Iterator[None]:
    """Within the block, each chosen decoder block's ALiBi bias is built from the key
    positions π ``[rows, K]`` that ``source`` gives, in the model's own form
    (:mod:`..alibi.rows`); ``heads=`` keeps the model's own bias in the other heads."""
    keep = None
    if heads is not None:
        keep = torch.ones(int(model.config.num_attention_heads), dtype=torch.bool)
        keep[list(heads)] = False
    replace = bias_replacer(model, family, source, keep)
    checks: list[Callable[[], None] | None] = []

    def pre_hook(block: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        hidden = args[0] if args else kwargs["hidden_states"]
        kwargs, done = replace(block, hidden, kwargs)
        checks.append(done)
        return args, kwargs

    def post_hook(block: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        done = checks.pop() if checks else None
        if done is not None:
            done()

    blocks = family.blocks(model)
    chosen = range(len(blocks)) if layers is None else layers
    with ExitStack() as stack:
        for i in chosen:
            for handle in (
                blocks[i].register_forward_pre_hook(pre_hook, with_kwargs=True),
                blocks[i].register_forward_hook(post_hook, with_kwargs=True),
            ):
                stack.callback(handle.remove)
        yield


# ---------------------------------------------------------------- generation
def generation_source(model: torch.nn.Module, plan: Any) -> PositionSource | KeyPositions:
    """The per-call positions of a ``generate`` call planned by ``plan`` (a
    :class:`~posgen.harness.hf_posgen.generation.GenerationPlan`) for a non-rotary ``model``: each call first
    records its step from the natural positions the model used (``plan.follow``: the
    ids handed to an absolute table; for ALiBi the ones its own bias is built from,
    :mod:`..alibi.rows`), then reads
    the planned ones (the current columns; ALiBi: every key column so far)."""
    family = position_family_of(model)
    if family.kind == "absolute":

        def absolute(module: torch.nn.Module, given: torch.Tensor) -> torch.Tensor:
            plan.follow(module, given)
            return plan.positions(module, given)

        return absolute
    block = family.blocks(model)[0]

    def keys(natural: torch.Tensor, width: int) -> torch.Tensor:
        total = natural.shape[-1]
        step = plan.follow(block, natural[:, total - width :])
        table = plan.table[:, :total].to(natural.device)
        return table if step.expand == 1 else table.repeat_interleave(step.expand, 0)

    return keys
