"""Seeded reorderings of n items, shared by text (words) and position (token index) schemes.

Every function returns ``perm``, an int64 array of length n, meaning: the item placed at
slot t is the original item ``perm[t]``. For words, ``new_words = words[perm]``; for
positions, token t is given the original position index ``perm[t]``.
Each also returns how many items the scheme selected to move.

The swap schemes are *nested*: the random stream does not depend on the rate, and the
pairs swapped at rate r are a prefix of those swapped at any r' > r.
"""

from __future__ import annotations

import math

import numpy as np

from posgen.perturbations.seeding import random_order


def n_swap_pairs(n: int, rate: float) -> int:
    """⌊r·n/2⌋, computed so that float error cannot drop a pair (0.05*40/2 == 1)."""
    return math.floor(rate * n / 2 + 1e-9)


def swap_pairs(n: int, rate: float, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """Swap ⌊r·n/2⌋ disjoint random pairs: one random order of all n items, taken two by two."""
    perm = np.arange(n, dtype=np.int64)
    if n < 2:
        return perm, 0
    order = random_order(n, rng)
    m = n_swap_pairs(n, rate)
    a, b = order[0 : 2 * m : 2], order[1 : 2 * m : 2]
    perm[a], perm[b] = b, a
    return perm, 2 * m


def adjacent_pairs(n: int, rate: float, rng: np.random.Generator) -> tuple[np.ndarray, int]:
    """Swap ⌊r·n/2⌋ disjoint adjacent pairs, chosen in random order among the tiles
    (0,1), (2,3), ...; rate 1 swaps every tile."""
    perm = np.arange(n, dtype=np.int64)
    tiles = n // 2
    if tiles == 0:
        return perm, 0
    order = random_order(tiles, rng)
    m = min(n_swap_pairs(n, rate), tiles)
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
