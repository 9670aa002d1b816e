"""Seeded bootstrap counts over documents, shared by the tables and the scores."""

from __future__ import annotations

import numpy as np

from posgen.perturbations.seeding import item_rng


def resample_counts(n: int, iters: int, seed: int, key: str) -> np.ndarray:
    """Bootstrap counts ``[iters, n]`` (int64): row b says how often each document is drawn.

    Draw ``i_{b,k} = floor(u_{b,k} · n)`` for ``k = 1..n`` from uniform doubles, then count
    per row; every row sums to ``n``.
    """
    if n < 1:
        raise ValueError("cannot resample zero documents")
    rng = item_rng(seed, "posgen/bootstrap/v1", key)
    idx = np.minimum((rng.random((iters, n)) * n).astype(np.int64), n - 1)
    flat = idx + (np.arange(iters, dtype=np.int64) * n)[:, None]
    return np.bincount(flat.ravel(), minlength=iters * n).reshape(iters, n)
