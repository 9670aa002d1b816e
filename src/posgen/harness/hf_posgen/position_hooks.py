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
and noise at any batch size.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass

import numpy as np
import torch

from posgen.perturbations.features import FeaturePerturbation, QKNoise, RopeNoise
from posgen.perturbations.positions import PositionPerturbation
from posgen.perturbations.seeding import token_key


class NoRotaryEmbeddingError(ValueError):
    """The model has no rotary position embedding for position/feature schemes to act on."""


def rotary_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The model's rotary embedding modules (e.g. ``model.rotary_emb``,
    ``gpt_neox.rotary_emb``): every submodule whose class name ends in ``RotaryEmbedding``."""
    return [m for m in model.modules() if type(m).__name__.endswith("RotaryEmbedding")]


def require_rotary(model: torch.nn.Module, what: str) -> None:
    """Raise :class:`NoRotaryEmbeddingError` unless ``model`` has a rotary embedding."""
    if not rotary_modules(model):
        arch = getattr(getattr(model, "config", None), "model_type", type(model).__name__)
        raise NoRotaryEmbeddingError(
            f"{what} needs a model with rotary position embeddings (Llama, Qwen2/3, Mistral, "
            f"Gemma2/3, Phi3, GPT-NeoX, ...), but this {arch!r} model has none. Drop "
            "positions=/features= for this model; text perturbations (tasks) still work."
        )


@dataclass(frozen=True)
class BatchPlan:
    """What one forward of a right-padded batch needs.

    - ``lengths``: real (unpadded) length of each row, ``[B]``.
    - ``keys``: SHA-256 token key of each row's real tokens, ``[B]``.
    - ``positions``: position values ``[B, T]`` for the rotary embedding (long, or float32
      when non-integer), or None when positions are not changed. Padding slots get t.
    - ``qk_noise``: the qk-noise scheme, or None.
    """

    lengths: tuple[int, ...]
    keys: tuple[bytes, ...]
    positions: torch.Tensor | None
    qk_noise: QKNoise | None
    seed: int


def build_plan(
    input_ids: torch.Tensor,
    lengths: Sequence[int],
    positions: PositionPerturbation | None,
    features: FeaturePerturbation | None,
    seed: int,
) -> BatchPlan:
    """Plan one forward of ``input_ids`` ``[B, T]`` whose row b has ``lengths[b]`` real
    tokens followed by padding.

    Positions: ``p_b[t] = scheme(real tokens of b)[t] (+ σ·z_b[t] for rope_noise)`` for
    ``t < lengths[b]``, and ``t`` on padding (causal attention never lets a real token see
    padding to its right, so those values cannot matter).
    """
    ids = input_ids.detach().to("cpu", torch.int64).numpy()
    batch, width = ids.shape
    if len(lengths) != batch or any(not 0 < n <= width for n in lengths):
        raise ValueError(f"lengths {list(lengths)} do not fit a batch of shape {ids.shape}")
    rows = [ids[b, :n] for b, n in enumerate(lengths)]
    keys = tuple(token_key(r) for r in rows)
    rope_noise = features if isinstance(features, RopeNoise) and not features.is_identity else None
    pos = positions if positions is not None and not positions.is_identity else None
    table = None
    if pos is not None or rope_noise is not None:
        table = _position_table(rows, width, pos, rope_noise, seed)
    qk = features if isinstance(features, QKNoise) and not features.is_identity else None
    return BatchPlan(tuple(int(n) for n in lengths), keys, table, qk, int(seed))


def _position_table(
    rows: list[np.ndarray],
    width: int,
    positions: PositionPerturbation | None,
    rope_noise: RopeNoise | None,
    seed: int,
) -> torch.Tensor:
    """Position values ``[B, T]``: long when every value is an integer, else float32."""
    table = np.tile(np.arange(width, dtype=np.float64), (len(rows), 1))
    integral = rope_noise is None
    for b, row in enumerate(rows):
        n = row.size
        if positions is not None:
            values = positions.position_values(row, seed)
            integral = integral and values.dtype.kind in "iu"
            table[b, :n] = values
        if rope_noise is not None:
            table[b, :n] += rope_noise.offsets(row, seed)
    if integral:
        return torch.from_numpy(table.astype(np.int64))
    return torch.from_numpy(table.astype(np.float32))


@contextmanager
def rotary_positions(model: torch.nn.Module, positions: torch.Tensor) -> Iterator[None]:
    """Within the block, every rotary embedding of ``model`` computes its (cos, sin) from
    ``positions`` ``[B, T]`` instead of the ``position_ids`` the model passes (``[1, T]``
    or ``[B, T]``, consecutive). The hooks are always removed on exit."""
    modules = rotary_modules(model)
    if not modules:
        require_rotary(model, "a position perturbation")
    cache: dict[torch.device, torch.Tensor] = {}

    def pre_hook(module: torch.nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
        in_kwargs = "position_ids" in kwargs
        given = kwargs["position_ids"] if in_kwargs else args[1]
        if (
            given.dim() != 2
            or given.shape[-1] != positions.shape[-1]
            or given.shape[0] not in (1, positions.shape[0])
        ):
            raise RuntimeError(
                f"{type(module).__name__} got position_ids of shape {tuple(given.shape)}, but "
                f"posgen planned positions for a batch of shape {tuple(positions.shape)}; "
                "position perturbations support one full forward per batch (no KV cache)"
            )
        new = cache.get(given.device)
        if new is None:
            new = cache[given.device] = positions.to(given.device)
        if in_kwargs:
            return args, {**kwargs, "position_ids": new}
        return (args[0], new, *args[2:]), kwargs

    handles = [m.register_forward_pre_hook(pre_hook, with_kwargs=True) for m in modules]
    try:
        yield
    finally:
        for handle in handles:
            handle.remove()
