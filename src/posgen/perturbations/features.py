"""Feature-level perturbations: seeded Gaussian noise on what the model knows of positions.

- ``rope_noise:σ`` jitters each real token's position before the rotary angles are
  computed: ``p'[t] = p[t] + σ·z[t]``, ``z[t] ~ N(0, 1)``, shape ``[n]``.
- ``qk_noise:σ`` adds relative Gaussian noise to the post-RoPE query and key vector of
  every head, token and layer: ``q' = q + σ·(‖q‖/√d)·ε``, ``ε ~ N(0, I_d)`` (same for k),
  so that ``E‖q' − q‖² = σ²‖q‖²``.

Both are nested across σ: the random stream does not depend on σ, so the same standard
normal draws are scaled by every σ and results pair across σ. Draws are keyed by the
sequence's own real token ids (see :mod:`posgen.perturbations.seeding`), so they do not
depend on padding, batch size or order. σ = 0 is the identity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from posgen.perturbations.base import Perturbation, check_nonnegative, registry
from posgen.perturbations.seeding import item_rng, token_key


def standard_normal(rng: np.random.Generator, n: int) -> np.ndarray:
    """n standard normal draws by Box–Muller from 2n uniforms (``Generator.random`` only):
    ``z = √(−2 ln(1 − u₁)) · cos(2π u₂)``, u ∈ [0, 1). Shape ``[n]``, float64."""
    u = rng.random((2, n))
    return np.sqrt(-2.0 * np.log1p(-u[0])) * np.cos(2.0 * np.pi * u[1])


@dataclass(frozen=True)
class FeaturePerturbation(Perturbation):
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

    def offsets(self, token_ids: np.ndarray | list[int], seed: int) -> np.ndarray:
        """``σ·z``, shape ``[n]`` (float64), for one sequence of real tokens."""
        ids = np.asarray(token_ids, dtype=np.int64)
        if self.is_identity or ids.size == 0:
            return np.zeros(ids.size, dtype=np.float64)
        rng = item_rng(seed, self.stream_name(), token_key(ids))
        return float(self.sigma) * standard_normal(rng, int(ids.size))


@registry.register
@dataclass(frozen=True)
class QKNoise(FeaturePerturbation):
    """Relative Gaussian noise of scale σ on post-RoPE query and key vectors, per head."""

    name: ClassVar[str] = "qk_noise"
    version: ClassVar[int] = 2  # v2: only the context of a request is perturbed

    def stream_seed(self, seed: int, key: bytes, layer: int, tensor: str) -> int:
        """A 53-bit seed for the noise of one sequence (``key``: its token key), one layer
        and one tensor (``"query"`` or ``"key"``); the draws themselves are made in torch
        by :mod:`posgen.harness.hf_posgen.qk_noise`."""
        if tensor not in ("query", "key"):
            raise ValueError(f"tensor must be 'query' or 'key', got {tensor!r}")
        stream = f"{self.stream_name()}/layer={int(layer)}/{tensor}"
        return int(item_rng(seed, stream, key).random() * 2.0**53)
