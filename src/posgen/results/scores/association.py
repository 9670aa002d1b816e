"""Correlation across a handful of models, with an exact permutation p-value
(:func:`permutation_correlation`), and the cross-model relation of a run (:func:`cross_model`).

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
from collections.abc import Collection, Mapping
from functools import lru_cache
from typing import Any

import numpy as np
from scipy import stats

from posgen.perturbations.seeding import item_rng
from posgen.results.scores.tolerance import relation_spread

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


def cross_model(
    per_model: Mapping[str, Mapping[str, float]],
    x: str,
    y: str,
    *,
    seed: int = 0,
    twins: Collection[str] = (),
    resampled: Mapping[str, np.ndarray] | None = None,
) -> dict[str, Any]:
    """Spearman and Pearson correlation of ``x`` and ``y`` across models, each with an
    exact permutation p-value (:mod:`posgen.results.scores.association`, which states the
    reading rule). Random-init ``twins`` are listed, not counted. ``resampled`` (per
    model, replicates ``[B]`` of ``y`` under joint document resampling) adds the band of
    each correlation over those replicates: the relation's spread from the models'
    own tolerance uncertainty. Fewer than 3 models or a constant variable: not
    estimable, no number."""

    names = sorted(
        m
        for m, v in per_model.items()
        if m not in twins and np.isfinite(v.get(x, np.nan)) and np.isfinite(v.get(y, np.nan))
    )
    n = len(names)
    out: dict[str, Any] = {
        "x": x,
        "y": y,
        "n": n,
        "models": names,
        "twins": sorted(m for m in per_model if m in twins),
        "rule": RULE,
    }
    if n < 3:
        return {**out, "estimable": False, "reason": f"not estimable: {n} model(s), 3 needed"}
    xs = np.array([per_model[m][x] for m in names])
    ys = np.array([per_model[m][y] for m in names])
    if np.ptp(xs) == 0 or np.ptp(ys) == 0:
        return {**out, "estimable": False, "reason": "not estimable: a variable is constant"}
    for method in ("spearman", "pearson"):
        res = permutation_correlation(xs, ys, method, seed=seed, key=f"{x}|{y}")
        if resampled is not None and all(m in resampled for m in names):
            reps = {m: resampled[m] for m in names}
            res["doc_resampled"] = relation_spread(dict(zip(names, xs, strict=True)), reps, method)
        out[method] = res
    descriptive = n < MIN_CLAIM
    claim = not descriptive and out["spearman"]["p"] <= 0.05
    return {**out, "estimable": True, "descriptive_only": descriptive, "claim": claim}
