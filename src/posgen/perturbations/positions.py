"""Position-index perturbations: the tokens stay in order, only their position values change.

A position scheme maps the n real tokens of one sequence (padding excluded) to n position
values ``p ∈ ℝⁿ``; the model's rotary embedding then rotates query and key of token t by
the angles ``p[t]·θ_i`` instead of ``t·θ_i``. Reordering schemes return a permutation
(token t gets the original index ``perm[t]``, see :mod:`posgen.perturbations.orderings`);
``shift`` and ``scale`` return ``t + s`` and ``t·f``.

Randomness comes from :func:`posgen.perturbations.seeding.item_rng` keyed by the
sequence's own real token ids, so a sequence gets the same positions at any batch size,
in any order and in any process.

In a log-likelihood request only the context is perturbed (:meth:`PositionPerturbation.
row_values`): its positions are drawn from the context tokens alone, and the continuation
keeps its own positions in order after it, as text perturbations never touch the answer.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import ClassVar

import numpy as np

from posgen.perturbations import orderings
from posgen.perturbations.base import (
    PerturbationError,
    RateMixin,
    check_window,
    registry,
)
from posgen.perturbations.model_side import ModelSidePerturbation
from posgen.perturbations.order_stats import OrderStats, order_stats
from posgen.perturbations.seeding import item_rng, token_key


@dataclass(frozen=True)
class PositionResult:
    """The position values of one sequence's real tokens and how much the order changed.

    ``values``: shape ``[n]``, int64 for reorderings and ``shift``, float64 for ``scale``.
    """

    values: np.ndarray
    stats: OrderStats


@dataclass(frozen=True)
class PositionPerturbation(ModelSidePerturbation):
    """Base class of position schemes. Subclasses implement :meth:`values`."""

    kind: ClassVar[str] = "position"
    where: ClassVar[str] = "positions"
    uses_rng: ClassVar[bool] = True

    def values(self, n: int, rng: np.random.Generator | None) -> tuple[np.ndarray, int]:
        """Position values for n tokens and how many tokens the scheme selected to move."""
        raise NotImplementedError

    def position_values(self, token_ids: np.ndarray | list[int], seed: int) -> np.ndarray:
        """Position values for one sequence of real tokens (no padding), shape ``[n]``."""
        return self._values(np.asarray(token_ids, dtype=np.int64), seed)[0]

    def row_values(self, token_ids: np.ndarray | list[int], span: int, seed: int) -> np.ndarray:
        """Position values ``[n]`` for one row whose first ``span`` tokens are perturbed.

        A random scheme draws the first ``span`` values from those tokens alone, and the
        rest continue in order: ``p[t] = t`` for ``t >= span``. A deterministic scheme
        (``shift``, ``scale``) moves the whole row's frame: ``p = values(n)``, so that the
        continuation stays where the context leaves off.
        """
        ids = np.asarray(token_ids, dtype=np.int64)
        if not 0 < span <= ids.size:
            raise ValueError(f"{self.name}: span {span} outside 1..{ids.size}")
        if not self.uses_rng:
            return self._values(ids, seed)[0]
        head = self._values(ids[:span], seed)[0]
        return np.concatenate([head, np.arange(span, ids.size, dtype=np.int64)])

    def draw(self, token_ids: np.ndarray, span: int, seed: int) -> np.ndarray:
        """Offsets ``p[t] − t`` of :meth:`row_values` (the model-side interface)."""
        values = self.row_values(token_ids, span, seed)
        return values - np.arange(values.size, dtype=values.dtype)

    def apply(self, token_ids: np.ndarray | list[int], seed: int) -> PositionResult:
        """Position values and order statistics for one sequence of real tokens."""
        values, n_selected = self._values(np.asarray(token_ids, dtype=np.int64), seed)
        # Read in position order, slot s holds token order[s]: the text-equivalent reordering.
        order = np.argsort(values, kind="stable")
        return PositionResult(values, order_stats(order, n_selected))

    def _values(self, ids: np.ndarray, seed: int) -> tuple[np.ndarray, int]:
        if ids.ndim != 1:
            raise ValueError(
                f"{self.name}: expected the 1-D token ids of one sequence, got shape {ids.shape}"
            )
        n = int(ids.size)
        if self.is_identity or n == 0:
            return np.arange(n, dtype=np.int64), 0
        rng = item_rng(seed, self.stream_name(), token_key(ids)) if self.uses_rng else None
        return self.values(n, rng)


class _RateScheme(RateMixin, PositionPerturbation):
    """Position reorderings parameterised by a nested rate."""


@registry.register
@dataclass(frozen=True)
class PositionSwap(_RateScheme):
    """Swap the position indices of random disjoint token pairs; the expected fraction
    of tokens whose position changes is ``rate`` at every sequence length n:
    ``pairs = min(⌊rate·n/2 + u⌋, ⌊n/2⌋)``, u ∈ [0, 1) one rate-free draw per sequence
    (see :func:`posgen.perturbations.orderings.n_swap_pairs`). Nested across rates.
    Version 2 (version 1 swapped ⌊rate·n/2⌋ pairs: nothing under 50 tokens at 2%)."""

    name: ClassVar[str] = "swap"
    version: ClassVar[int] = 3  # v2: only a request's context; v3: E[fraction moved] = rate
    rate: float = 0.05

    def values(self, n: int, rng: np.random.Generator | None) -> tuple[np.ndarray, int]:
        assert rng is not None
        return orderings.swap_pairs(n, self.rate, rng)


@registry.register
@dataclass(frozen=True)
class PositionAdjacentSwap(_RateScheme):
    """Swap the position indices of disjoint neighbouring pairs; the expected fraction
    moved is ``rate`` (stochastic rounding as :class:`PositionSwap`). Nested. Version 2."""

    name: ClassVar[str] = "adjacent"
    version: ClassVar[int] = 3  # v2: only a request's context; v3: E[fraction moved] = rate
    rate: float = 0.05

    def values(self, n: int, rng: np.random.Generator | None) -> tuple[np.ndarray, int]:
        assert rng is not None
        return orderings.adjacent_pairs(n, self.rate, rng)


@registry.register
@dataclass(frozen=True)
class PositionLocalShuffle(PositionPerturbation):
    """Shuffle the position indices within consecutive windows of ``window`` tokens."""

    name: ClassVar[str] = "local_shuffle"
    version: ClassVar[int] = 2  # v2: only the context of a request is perturbed
    short_param: ClassVar[str] = "window"
    window: int = 3

    def validate(self) -> None:
        check_window(self.name, self.window)

    def values(self, n: int, rng: np.random.Generator | None) -> tuple[np.ndarray, int]:
        assert rng is not None
        return orderings.local_shuffle(n, self.window, rng)


@registry.register
@dataclass(frozen=True)
class PositionShuffle(PositionPerturbation):
    """A uniformly random permutation of all position indices."""

    name: ClassVar[str] = "shuffle"
    version: ClassVar[int] = 2  # v2: only the context of a request is perturbed

    def values(self, n: int, rng: np.random.Generator | None) -> tuple[np.ndarray, int]:
        assert rng is not None
        return orderings.full_shuffle(n, rng)


@registry.register
@dataclass(frozen=True)
class PositionShift(PositionPerturbation):
    """Offset every position by a constant: ``p[t] = t + offset``. RoPE scores depend on
    ``p[i] − p[j]`` only, so this changes log-likelihoods by float noise alone."""

    name: ClassVar[str] = "shift"
    short_param: ClassVar[str] = "offset"
    uses_rng: ClassVar[bool] = False
    offset: int = 0

    #: positions are int64 (torch's position ids): an offset past this would wrap around
    #: once the tokens' own positions are added to it
    MAX_OFFSET: ClassVar[int] = 2**62

    def validate(self) -> None:
        if isinstance(self.offset, bool) or not isinstance(self.offset, int) or self.offset < 0:
            raise PerturbationError(f"shift: offset must be an int >= 0, got {self.offset!r}")
        if self.offset > self.MAX_OFFSET:
            raise PerturbationError(
                f"shift: offset {self.offset} is past 2**62; positions are 64-bit integers, "
                "so the shifted positions would wrap around: pass a smaller offset"
            )

    @property
    def is_identity(self) -> bool:
        return self.offset == 0

    def values(self, n: int, rng: np.random.Generator | None) -> tuple[np.ndarray, int]:
        return np.arange(n, dtype=np.int64) + self.offset, 0


@registry.register
@dataclass(frozen=True)
class PositionScale(PositionPerturbation):
    """Position interpolation: ``p[t] = t · factor`` (factor < 1 compresses positions)."""

    name: ClassVar[str] = "scale"
    short_param: ClassVar[str] = "factor"
    uses_rng: ClassVar[bool] = False
    factor: float = 1.0

    def validate(self) -> None:
        f = self.factor
        if isinstance(f, bool) or not isinstance(f, (int, float)) or not math.isfinite(f) or f <= 0:
            raise PerturbationError(f"scale: factor must be a finite number > 0, got {f!r}")

    @property
    def is_identity(self) -> bool:
        return self.factor == 1

    def values(self, n: int, rng: np.random.Generator | None) -> tuple[np.ndarray, int]:
        return np.arange(n, dtype=np.float64) * float(self.factor), 0
