"""Position and feature schemes in chosen decoder layers only (``layers=``).

In transformers 5.x the model's rotary embedding computes ``(cos, sin)`` once per forward
and every decoder layer's attention receives them as ``position_embeddings=(cos, sin)``
(Gemma3: one pair per layer type). For a layer subset posgen leaves the model's rotary
call alone, so every layer sees the model's own angles, and:

- a forward hook on the rotary module computes the perturbed pair from the planned
  positions by calling the same module again (``module.forward(x, positions, ...)``: the
  model's own RoPE code, never a re-implementation), remembered against the pair the
  model computed;
- a forward pre-hook on the attention module of each chosen layer swaps the model's pair
  for its perturbed twin.

The perturbed pair is the one the global path (a pre-hook on the rotary module, see
:func:`posgen.harness.model_side.positions.rotary.rotary_positions`) computes: the same
module on the same inputs, so selecting every layer reproduces the global perturbation
bit for bit, and layers before the first chosen one compute exactly what plain ``hf``
computes. ``qk`` schemes are gated by the attention module's ``layer_idx``
(:mod:`..attention.qk_noise`).

Layer specs are read by :mod:`.selection`.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import ExitStack, contextmanager
from contextvars import ContextVar

import torch

from posgen.compat import patched_rotary
from posgen.harness.model_family import family_of, require_rotary, rotary_modules
from posgen.harness.model_side.positions.rotary import PositionSource, position_source
from posgen.harness.model_side.positions.selection import check_layers


def layer_count(model: torch.nn.Module) -> int:
    """Number of decoder layers: the attention modules that know their ``layer_idx``."""
    return len(_attention_by_layer(model))


def _attention_by_layer(model: torch.nn.Module) -> dict[int, torch.nn.Module]:
    found = family_of(model).attention_modules(model)
    return {int(m.layer_idx): m for m in found if getattr(m, "layer_idx", None) is not None}


# per layer, the query and key rotated by the perturbed angles, for head mixing (heads=)
TWIN_ROTATIONS: ContextVar[dict[int, tuple[torch.Tensor, torch.Tensor]] | None] = ContextVar(
    "posgen_twin_rotations", default=None
)


@contextmanager
def layer_positions(
    model: torch.nn.Module,
    positions: torch.Tensor | PositionSource,
    layers: Sequence[int],
    split_heads: bool = False,
) -> Iterator[None]:
    """Within the block, the attention of each layer in ``layers`` rotates by the angles
    of ``positions`` ``[B, T]`` (or a source's, per call); every other layer keeps the model's own. Hooks are
    always removed on exit.

    ``split_heads``: the chosen layers keep the model's own angles too, and the family's
    ``apply_rotary_pos_emb`` (the model's own function, called twice; wrapped through
    :func:`posgen.compat.patched_rotary`) also rotates their query and key by the
    perturbed angles into :data:`TWIN_ROTATIONS` for the attention function to mix per
    head (:mod:`..attention.qk_noise`)."""
    if split_heads:
        with _twin_rotations(model, positions, layers):
            yield
        return
    rotaries = rotary_modules(model)
    if not rotaries:
        require_rotary(model, "a position perturbation")
    by_layer = _attention_by_layer(model)
    check_layers(layers, len(by_layer))
    twins: list[tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]] = []

    rotary_hook = _twin_angles(positions, twins)

    def attention_hook(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple:
        plain = kwargs.get("position_embeddings")
        twin = None if plain is None else next((p for c, p in twins if c is plain[0]), None)
        if twin is None:
            raise RuntimeError(
                f"{type(module).__name__} (layer {module.layer_idx}) did not receive the "
                "rotary angles of this forward as position_embeddings; posgen cannot "
                "perturb positions in chosen layers of this model"
            )
        return args, {**kwargs, "position_embeddings": twin}

    handles = [r.register_forward_hook(rotary_hook, with_kwargs=True) for r in rotaries]
    handles += [
        by_layer[i].register_forward_pre_hook(attention_hook, with_kwargs=True) for i in layers
    ]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()


def _twin_angles(positions: torch.Tensor | PositionSource, twins: list) -> object:
    """A forward hook for a rotary module: the same module called again with
    ``positions``; appends ``(the model's cos, (cos', sin'))`` to ``twins``, which holds
    the pairs of the current forward only (a forward passes every rotary call the same
    ``position_ids``; a new one starts the list again)."""
    source = position_source(positions)
    seen: list[torch.Tensor] = []  # the position_ids of the forward the pairs belong to

    def rotary_hook(module: torch.nn.Module, args: tuple, kwargs: dict, output) -> None:
        in_kwargs = "position_ids" in kwargs
        given = kwargs["position_ids"] if in_kwargs else args[1]
        if not seen or seen[0] is not given:
            twins.clear()
            seen[:] = [given]
        new = source(module, given)
        if in_kwargs:
            perturbed = module.forward(*args, **{**kwargs, "position_ids": new})
        else:
            perturbed = module.forward(args[0], new, *args[2:], **kwargs)
        twins.append((output[0], perturbed))

    return rotary_hook


@contextmanager
def _twin_rotations(
    model: torch.nn.Module, positions: torch.Tensor | PositionSource, layers: Sequence[int]
) -> Iterator[None]:
    """``layer_positions(..., split_heads=True)``: see there."""
    by_layer = _attention_by_layer(model)
    check_layers(layers, len(by_layer))
    twins: list[tuple[torch.Tensor, tuple[torch.Tensor, torch.Tensor]]] = []
    rotated: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    current: list[int] = []  # the chosen layer whose attention runs now

    rotary_hook = _twin_angles(positions, twins)

    def wrap(original):
        def apply_rotary(q, k, cos, sin, *args, **kwargs):
            plain = original(q, k, cos, sin, *args, **kwargs)
            if current:
                twin = next((t for c, t in twins if c is cos), None)
                if twin is None:
                    raise RuntimeError(
                        f"layer {current[-1]}: the rotary angles reached apply_rotary_pos_emb "
                        "without the model's own (cos, sin); posgen cannot split heads here"
                    )
                rotated[current[-1]] = original(q, k, twin[0], twin[1], *args, **kwargs)
            return plain

        return apply_rotary

    def enter(module, args, kwargs):
        current.append(int(module.layer_idx))

    def leave(module, args, kwargs, output):
        current.pop()

    with ExitStack() as stack:
        modeling = {type(by_layer[i]).__module__ for i in layers}
        family = family_of(model)
        for name in sorted(modeling):
            stack.enter_context(patched_rotary(name, family.apply_rotary, wrap))
        handles = [
            r.register_forward_hook(rotary_hook, with_kwargs=True) for r in rotary_modules(model)
        ]
        for i in layers:
            handles.append(by_layer[i].register_forward_pre_hook(enter, with_kwargs=True))
            handles.append(by_layer[i].register_forward_hook(leave, with_kwargs=True))
        stack.callback(lambda: [h.remove() for h in handles])
        token = TWIN_ROTATIONS.set(rotated)
        stack.callback(TWIN_ROTATIONS.reset, token)
        yield
