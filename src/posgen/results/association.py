"""Correlation across a handful of models, with an exact permutation p-value.

For ``n`` models with values ``x_i, y_i`` (``[n]`` each):

- Pearson ``r = Σ (x_i - x̄)(y_i - ȳ) / ((n - 1) s_x s_y)``; Spearman ``ρ`` is Pearson on
  the ranks (ties get average ranks).
- Permutation p-value (two-sided) under H0 "x and y are independent" (exchangeability
  of the pairing): ``p = #{π : |r(x, y_π)| >= |r(x, y)|} / #π`` over all ``n!``
  pairings for ``n <= EXACT_MAX`` (exact), else over ``B`` seeded random pairings with
  ``p = (hits + 1) / (B + 1)``. Either way ``P(p <= α) <= α`` under H0, whatever the
  distribution of the values.

Reading rule (also printed in the report): with ``n <= 4`` models no p-value can reach
.05 below 1/12 and the figures are descriptive only; a relation is claimed only when
``n >= 5`` and ``p <= .05``. No interval over models is given at any ``n``: a bootstrap
over 3–10 models is degenerate (at n = 3, 2/3 of resamples hold two models and give
``±1``) and under H0 excludes 0 far more often than 5 %.
"""

from __future__ import annotations

import itertools
import math
from functools import lru_cache

import numpy as np
from scipy import stats

from posgen.perturbations.seeding import item_rng

EXACT_MAX = 8  # 8! = 40 320 pairings; beyond, seeded random pairings
RANDOM_PAIRINGS = 9999
MIN_CLAIM = 5  # fewer models: descriptive only
RULE = (
    "n ≤ 4 models: descriptive only (the smallest possible two-sided p is 1/3 at n = 3, "
    "1/12 at n = 4); a relation is claimed only for n ≥ 5 and an exact permutation "
    "p ≤ .05; no interval over models is given (a bootstrap over so few models is "
    "degenerate); random-init twins are shown beside their models, not counted."
)


@lru_cache(maxsize=8)
def _all_pairings(n: int) -> np.ndarray:
    """Every permutation of ``range(n)``: ``[n!, n]`` int64."""
    return np.array(list(itertools.permutations(range(n))), dtype=np.int64)


def _standardised(v: np.ndarray) -> np.ndarray:
    c = v - v.mean()
    return c / math.sqrt((c * c).sum())


def permutation_correlation(
    x: np.ndarray, y: np.ndarray, method: str = "spearman", *, seed: int = 0, key: str = ""
) -> dict[str, float | int | bool]:
    """``{"r", "p", "exact", "pairings"}`` for ``method`` in {spearman, pearson}.

    ``x, y``: ``[n]`` finite, ``n >= 3``, neither constant (else ``ValueError``).
    """
    x, y = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    n = x.size
    if y.shape != (n,) or n < 3:
        raise ValueError("need two vectors of the same length, at least 3 models")
    if not (np.isfinite(x).all() and np.isfinite(y).all()) or np.ptp(x) == 0 or np.ptp(y) == 0:
        raise ValueError("values must be finite and not constant")
    if method == "spearman":
        x, y = stats.rankdata(x), stats.rankdata(y)
    elif method != "pearson":
        raise ValueError(f"unknown method {method!r}: spearman or pearson")
    xs, ys = _standardised(x), _standardised(y)
    r = float(xs @ ys)
    exact = n <= EXACT_MAX
    if exact:
        perms = _all_pairings(n)
    else:
        rng = item_rng(seed, "posgen/permutation/v1", key)
        perms = rng.permuted(np.tile(np.arange(n), (RANDOM_PAIRINGS, 1)), axis=1)
    null = ys[perms] @ xs  # [pairings]
    hits = int((np.abs(null) >= abs(r) - 1e-12).sum())
    p = hits / len(perms) if exact else (hits + 1) / (RANDOM_PAIRINGS + 1)
    return {"r": r, "p": min(p, 1.0), "exact": exact, "pairings": len(perms)}
