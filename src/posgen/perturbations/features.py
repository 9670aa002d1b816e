"""Feature-level perturbations: seeded Gaussian noise on what the model knows of positions.

- ``rope_noise:σ`` jitters each real token's position before the rotary angles are
  computed: ``p'[t] = p[t] + σ·z[t]``, ``z[t] ~ N(0, 1)``, shape ``[n]``.
- ``qk_noise:σ`` adds relative Gaussian noise to the post-RoPE query and key vector of
  every head, token and layer: ``q' = q + σ·(‖q‖/√d)·ε``, ``ε ~ N(0, I_d)`` (same for k),
  so that ``E‖q' − q‖² = σ²‖q‖²``.

Both are nested across σ: the random stream does not depend on σ, so the same standard
normal draws are scaled by every σ and results pair across σ. Draws are keyed by the
sequence's own real token ids (see :mod:`posgen.perturbations.seeding`), so they do not
depend on padding, batch size or order. σ = 0 is the identity. Both act on the first
``span`` tokens of a row only (the context of a log-likelihood request), and both draw
from :func:`posgen.perturbations.seeding.standard_normal`; qk_noise makes its draws on
the model's device, inside attention.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from posgen.perturbations.base import check_nonnegative, registry
from posgen.perturbations.model_side import ModelSidePerturbation
from posgen.perturbations.seeding import standard_normal, stream_seed, token_key


@dataclass(frozen=True)
class FeaturePerturbation(ModelSidePerturbation):
    """Base class of feature schemes: one noise scale ``sigma`` >= 0, nested across σ."""

    kind: ClassVar[str] = "feature"
    short_param: ClassVar[str] = "sigma"
    nested_param: ClassVar[str] = "sigma"
    sigma: float

    def validate(self) -> None:
        check_nonnegative(self.name, "sigma", self.sigma)

    @property
    def is_identity(self) -> bool:
        return self.sigma == 0


@registry.register
@dataclass(frozen=True)
class RopeNoise(FeaturePerturbation):
    """Gaussian jitter of std σ on each token's position before the rotary angles."""

    name: ClassVar[str] = "rope_noise"
    version: ClassVar[int] = 2  # v2: only the context of a request is perturbed
    where: ClassVar[str] = "positions"

    def offsets(self, token_ids: np.ndarray | list[int], seed: int) -> np.ndarray:
        """``σ·z``, shape ``[n]`` (float64), for one sequence of real tokens."""
        ids = np.asarray(token_ids, dtype=np.int64)
        if self.is_identity or ids.size == 0:
            return np.zeros(ids.size, dtype=np.float64)
        stream = stream_seed(seed, self.stream_name(), token_key(ids))
        return float(self.sigma) * standard_normal(stream, (int(ids.size),))

    def draw(self, token_ids: np.ndarray, span: int, seed: int) -> np.ndarray:
        """``σ·z`` drawn from the first ``span`` tokens, 0 after them; shape ``[n]``."""
        ids = np.asarray(token_ids, dtype=np.int64)
        out = np.zeros(ids.size, dtype=np.float64)
        out[:span] = self.offsets(ids[:span], seed)
        return out


@registry.register
@dataclass(frozen=True)
class QKNoise(FeaturePerturbation):
    """Relative Gaussian noise of scale σ on post-RoPE query and key vectors, per head."""

    name: ClassVar[str] = "qk_noise"
    version: ClassVar[int] = 2  # v2: only the context of a request is perturbed
    where: ClassVar[str] = "qk"

    def stream_seed(self, seed: int, key: bytes, layer: int, tensor: str) -> int:
        """The 64-bit seed of the noise of one sequence (``key``: its token key), one
        layer and one tensor (``"query"`` or ``"key"``)."""
        if tensor not in ("query", "key"):
            raise ValueError(f"tensor must be 'query' or 'key', got {tensor!r}")
        return stream_seed(seed, f"{self.stream_name()}/layer={int(layer)}/{tensor}", key)

    def perturb_qk(
        self,
        x: Any,
        tensor: str,
        layer: int,
        spans: Sequence[int],
        keys: Sequence[bytes],
        seed: int,
        slots: Sequence[np.ndarray | None] = (),
    ) -> Any:
        """``x[b, h, t] + σ·(‖x[b, h, t]‖/√d)·ε[b, h, t]`` for ``t < spans[b]`` (or t in
        ``slots[b]`` when given), ``x`` elsewhere; ``x``: torch ``[B, H, T, d]``,
        ε ~ N(0, I_d) drawn on ``x.device`` from row b's stream (shape ``[H, k, d]`` for
        its k perturbed tokens)."""
        batch, heads, _, dim = x.shape
        if batch != len(spans):
            raise RuntimeError(f"qk_noise planned {len(spans)} rows, attention got {batch}")
        noise = x.new_zeros(x.shape)
        for b, (span, key) in enumerate(zip(spans, keys, strict=True)):
            stream = self.stream_seed(seed, key, layer, tensor)
            idx = slots[b] if slots else None
            at, k = (slice(0, span), span) if idx is None else (idx.tolist(), idx.size)
            if k:
                draw = standard_normal(stream, (heads, k, dim), device=x.device)
                noise[b][:, at] = draw.to(noise.dtype)  # noise[b] is a view
        scale = float(self.sigma) * x.norm(dim=-1, keepdim=True) / math.sqrt(dim)
        return x + scale * noise
