"""The gate's test: a weighted paired t-test per cell, Holm over the cells.

Per cell and document ``d = 1..n`` (the same documents in both runs): the per-document
degradation ``g_d = ll_base/w - ll_pert/w`` (nats per word or byte; for accuracy the
score drop) in the baseline run and in the candidate, and their difference
``δ_d = g_cand,d - g_base,d`` (> 0: the candidate degrades more). With weights ``w_d``
(words, or 1 for accuracy):

    Δ  = Σ w δ / Σ w                      (the change of log perplexity ratio)
    se = sd(w (δ - Δ) / mean(w)) / sqrt(n)   (ddof = 1; delta method)
    t  = (Δ - margin) / se,   p = P(T_{n-1} >= t)   (one-sided, H1: Δ > margin)

Pairing by document removes document difficulty (it is in both g's), which is why a
0.04 nats/word drop on 12 documents is caught where unpaired standard errors miss it.
``se = 0`` (every document changed by exactly the same amount): ``p = 0`` when
``Δ > margin``, else 1. Assumption: documents independent; δ roughly symmetric (at
n = 12 the sign-flip and paired-bootstrap variants behave the same or worse).

Over ``m`` cells, :func:`holm` adjusts the p-values so that the chance of any false
alarm in the family stays at most α (Holm 1979): sort ``p_(1) <= ... <= p_(m)``,
``adj_(k) = max_{j <= k} min(1, (m - j + 1) p_(j))``. :func:`holm_factors` gives each
cell's factor ``k_i = max_{j <= k} (m - j + 1) p_(j) / p_(k)`` (in ``[1, m]``), so
``adj_i = min(1, k_i p_i)`` and a cell is rejected at α exactly when ``p_i <= α / k_i``:
its one-sided bound at level ``α / k_i`` is the interval that matches the verdict.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from scipy import stats


def weighted_paired_t(
    delta: Sequence[float], weights: Sequence[float], margin: float = 0.0
) -> dict[str, float]:
    """``{"change", "se", "p", "n"}`` of the one-sided test above; ``[n]`` inputs, n >= 2."""
    d, w = np.asarray(delta, dtype=np.float64), np.asarray(weights, dtype=np.float64)
    n = d.size
    if w.shape != (n,) or n < 2:
        raise ValueError("need paired differences and weights of the same length, n >= 2")
    if not (np.isfinite(d).all() and np.isfinite(w).all() and (w > 0).all()):
        raise ValueError("differences must be finite and weights finite and > 0")
    change = float((w * d).sum() / w.sum())
    se = float((w * (d - change) / w.mean()).std(ddof=1) / math.sqrt(n))
    if se <= 1e-12 * max(1.0, abs(change)):
        p = 0.0 if change > margin + 1e-12 else 1.0
    else:
        p = float(stats.t.sf((change - margin) / se, n - 1))
    return {"change": change, "se": se, "p": p, "n": n}


def holm(pvalues: Sequence[float]) -> np.ndarray:
    """Holm step-down adjusted p-values ``[m]`` (family-wise error control)."""
    p = np.asarray(pvalues, dtype=np.float64)
    m = p.size
    if m == 0:
        return p
    order = np.argsort(p, kind="stable")
    adj = np.minimum(1.0, np.maximum.accumulate((m - np.arange(m)) * p[order]))
    out = np.empty(m)
    out[order] = adj
    return out


def holm_factors(pvalues: Sequence[float]) -> np.ndarray:
    """Per p-value its Holm factor ``k_i`` (see the module doc; ``[m]`` -> ``[m]``): the
    unclipped adjusted p over the raw p, or the step's own ``m - j + 1`` when ``p_i = 0``."""
    p = np.asarray(pvalues, dtype=np.float64)
    m = p.size
    if m == 0:
        return p
    order = np.argsort(p, kind="stable")
    step = (m - np.arange(m)).astype(np.float64)
    adj = np.maximum.accumulate(step * p[order])
    with np.errstate(divide="ignore", invalid="ignore"):
        factor = np.where(p[order] > 0, adj / p[order], step)
    out = np.empty(m)
    out[order] = factor
    return out
