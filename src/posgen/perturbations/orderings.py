"""Seeded reorderings of n items, shared by text (words) and position (token index) schemes.

Every function returns ``perm``, an int64 array of length n, meaning: the item placed at
slot t is the original item ``perm[t]``. For words, ``new_words = words[perm]``; for
positions, token t is given the original position index ``perm[t]``.
Each also returns how many items the scheme selected to move.

The swap schemes are *nested* and *unbiased*: the random stream does not depend on the
rate, the pairs swapped at rate r are a prefix of those swapped at any r' > r, and the
pair count is rounded stochastically (:func:`n_swap_pairs`) so that the expected share
of items moved is r at every length n, even where r·n/2 < 1.
"""

from __future__ import annotations

import math

import numpy as np

from posgen.perturbations.seeding import random_order


def n_swap_pairs(n: int, rate: float, u: float, cap: int | None = None) -> int:
    """The nested stochastic rounding of the pair count: ``min(⌊r·n/2 + u⌋, cap)``.

    ``u`` ∈ [0, 1) is one uniform draw per item from the rate-free stream, the same for
    every rate, so the count never decreases as r grows (nesting) and, for u uniform,
    ``E[⌊r·n/2 + u⌋] = r·n/2`` exactly: the expected share of the n items moved by
    disjoint pair swaps, ``2·pairs/n``, is r at every n. ``cap`` (default ⌊n/2⌋, the most
    disjoint pairs) clips the count, so the expectation falls short of r only where
    ``r·n/2 > cap`` (odd n near r = 1).
    """
    if not 0.0 <= u < 1.0:
        raise ValueError(f"u must be in [0, 1), got {u!r}")
    cap = n // 2 if cap is None else cap
    return min(math.floor(rate * n / 2 + u), cap)


def swap_pairs(n: int, rate: float, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """Swap ``n_swap_pairs(n, r, u)`` disjoint random pairs: the rounding draw u first,
    then one random order of all n items, taken two by two (a prefix per rate)."""
    perm = np.arange(n, dtype=np.int64)
    if n < 2:
        return perm, 0
    u = float(rng.random())
    order = random_order(n, rng)
    m = n_swap_pairs(n, rate, u)
    a, b = order[0 : 2 * m : 2], order[1 : 2 * m : 2]
    perm[a], perm[b] = b, a
    return perm, 2 * m


def adjacent_pairs(n: int, rate: float, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """Swap ``n_swap_pairs(n, r, u)`` disjoint adjacent pairs, chosen in random order among
    the tiles (0,1), (2,3), ...; the rounding draw u comes first; rate 1 swaps every tile."""
    perm = np.arange(n, dtype=np.int64)
    tiles = n // 2
    if tiles == 0:
        return perm, 0
    u = float(rng.random())
    order = random_order(tiles, rng)
    m = n_swap_pairs(n, rate, u, cap=tiles)
    left = 2 * order[:m]
    perm[left], perm[left + 1] = left + 1, left
    return perm, 2 * m


def local_shuffle(n: int, window: int, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """Shuffle items within consecutive windows [0,k), [k,2k), ... (the last may be shorter)."""
    keys = rng.random(n)
    windows = np.arange(n, dtype=np.int64) // window
    perm = np.lexsort((keys, windows)).astype(np.int64)
    movable = n - (1 if n % window == 1 else 0) if window > 1 else 0
    return perm, movable


def full_shuffle(n: int, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """A uniformly random permutation of all n items."""
    return random_order(n, rng), n
