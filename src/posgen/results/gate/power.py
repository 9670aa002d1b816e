"""The gate's stated power: the smallest change each cell fails with 80 % power.

A cell's test (:mod:`posgen.results.stats.paired_test`) rejects when ``T = (Δ̂ - margin) /
se`` exceeds the critical value; with ``n`` documents the statistic is noncentral t with
``n - 1`` degrees of freedom and noncentrality ``λ = (Δ - margin) / σ_se`` at a true
change ``Δ``. Tested at Holm's first, strictest step ``α/m`` (the threshold of a cell when
it is the only one of ``m`` that changed; later steps are looser, so this is
conservative), its power is

    power(Δ) = P(T'_{n-1, λ} > t_{1-α/m, n-1})        (scipy.stats.nct)

and ``MDE80 = margin + λ80 · se``, ``λ80`` solving ``power = 0.8`` (``se``: the observed
paired standard error as ``σ_se``). The power is exact for that t model; a weighted
perplexity cell's t is itself the delta-method approximation of the test.

No claim is made where the spread cannot be estimated: when fewer than
:data:`MIN_MOVED` documents differ from the most common paired difference (all equal, as
for a same-seed rerun of the same checkpoint; or one cloze item flipped) ``se`` is 0 or
rests on one document, and the cell's power is ``unknown``. A cell "cannot detect a
change of its margin's size" (``underpowered``) when ``MDE80 > 2 · margin``; the documents
that would suffice solve ``λ80(n') · sd(δ) / √n' <= margin``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import lru_cache

import numpy as np

POWER = 0.8
MIN_MOVED = 2  # documents away from the modal paired difference needed to estimate sd(δ)
STATES = ("powered", "underpowered", "unknown", "no margin")


@lru_cache(maxsize=4096)
def noncentrality(n: int, cells: int, alpha: float, power: float = POWER) -> float:
    """``λ`` with ``P(T'_{n-1, λ} > t_{1-α/m, n-1}) = power`` (``m = cells``): the
    detectable excess over the margin in standard errors. Solved with scipy's ``nct``;
    the returned ``λ`` is the bracket's upper end, so its power is at least ``power``."""
    from scipy import optimize, stats

    df = n - 1
    crit = float(stats.t.ppf(1.0 - alpha / cells, df))

    def gap(lam: float) -> float:
        return float(stats.nct.sf(crit, df, lam)) - power

    lo, hi = crit, crit + 2.0 * float(stats.norm.ppf(power)) + 1.0
    while gap(hi) < 0:
        lo, hi = hi, 2.0 * hi
    root = float(optimize.brentq(gap, lo, hi, xtol=1e-12, rtol=1e-12))
    while gap(root) < 0:  # the root's upper side: power at least ``power``
        root += 1e-12 * max(1.0, root)
    return root


def spread_known(delta: Sequence[float]) -> bool:
    """Whether ``sd(δ)`` can be estimated: at least :data:`MIN_MOVED` documents differ
    from the most common paired difference (compared to 12 significant digits)."""
    d = np.asarray(delta, dtype=np.float64)
    scale = max(float(np.abs(d).max(initial=0.0)), 1e-300)
    _, counts = np.unique(np.round(d / scale, 12), return_counts=True)
    return d.size - int(counts.max(initial=0)) >= MIN_MOVED


def documents_needed(sd: float, margin: float, cells: int, alpha: float, cap: int = 10**6):
    """The smallest n' >= 2 with ``λ80(n') · sd / √n' <= margin`` (``sd`` and ``margin``
    on the test's scale); None when not even ``cap`` would do."""

    def enough(n: int) -> bool:
        return noncentrality(n, cells, alpha) * sd / math.sqrt(n) <= margin

    if sd <= 0:
        return 2
    if margin <= 0 or not enough(cap):
        return None
    lo, hi = 1, 2  # enough(n) is monotone in n: double, then bisect
    while not enough(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi
