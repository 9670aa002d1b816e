"""Which layers carry position: per-layer sensitivity and its relation to the decomposition.

**Sensitivity.** On the same ``n`` documents with per-document log-likelihoods ``bll_d``
(plain model) and ``pll_{ℓ,d}`` (positions perturbed in layer ℓ only) and word counts
``w_d``, layer ℓ's degradation is ``D_ℓ = PPL_ℓ / PPL_plain − 1`` with the run's log-t
interval (:func:`posgen.results.stats.intervals.ratio_interval`; documents are the
independent units). ``s_ℓ = log(1 + D_ℓ)`` is the sensitivity the relation uses.

**Additivity.** ``Σ_ℓ s_ℓ`` against ``s_all = log(1 + D_all)`` (every layer perturbed at
once): a ratio near 1 says the per-layer effects add up; below 1, perturbing several
layers compounds (each alone is partly repaired by the others); above 1, they overlap.

**Relation.** Over the ``L`` layers, Spearman's ``ρ(s, q)`` with a per-layer covariate
``q`` (the decomposition's mean fit r, its distance share, attention-output drift past
the trained context). Layers are not independent: neighbouring layers share residual
stream and tend to have similar values of both ``s`` and ``q``, so the ``L!`` pairings of
an ordinary permutation test treat a smooth profile as if every layer were a fresh draw
and overstate significance (simulated false-positive rate .11-.41 at α = .05 for
AR(1) profiles with φ = .5-.9). The null used here keeps each profile's order structure:
``q`` is read around a ring made of itself and its mirror image,
``e = (q_0 … q_{L-1}, q_{L-1} … q_0)``, and moved against ``s`` by every shift of that
ring (``2L`` windows ``e[k : k+L]``, the identity and the reversed profile among them):

    p = #{k : |ρ(s, e[k : k+L])| ≥ |ρ(s, q)|} / 2L        (two-sided; identity counted)

Each window is a stretch of ``q``'s own depth structure read forward or backward, with
no jump at the joins (a plain circular shift joins the last layer to the first, and that
jump made it too liberal: .07-.09 for smooth profiles). The smallest attainable p is
``1 / 2L`` (1/60 at 30 layers); a perfectly monotone relation gets ``1 / L`` (its mirror
image is as extreme), so with fewer than 20 layers such a profile cannot reach p ≤ .05.

The same test on first differences (``Δs_ℓ = s_{ℓ+1} − s_ℓ`` against ``Δq_ℓ``: do layer-to-
layer changes move together?) is reported beside it: a trend with depth that both
profiles share for unrelated reasons, which the levels test reads as association, is
removed by differencing. The report counts a covariate as associated only when both
tests give p ≤ α: each alone is exact only for a profile stationary around the ring and
came out at .03-.06 in simulation; together they stay below .05
(``benchmarks/sim_layer_relation.py``). Neither generalises beyond the one model or
says anything causal.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
from scipy import stats

from posgen.results.stats.intervals import ratio_interval


def degradation_row(
    bll: Sequence[float], pll: Sequence[float], words: Sequence[float]
) -> dict[str, float]:
    """``D``, its log-t interval and ``s = log(1 + D)`` for one perturbed cell."""
    row = ratio_interval(bll, words, pll, words, method="log-t")
    return {**row, "sensitivity": math.log1p(row["degradation"])}


def profile(
    bll: Sequence[float],
    cells: Mapping[str, Sequence[float]],
    words: Sequence[float],
) -> list[dict[str, Any]]:
    """One row per cell label (a layer index as text, or ``all``), in the given order."""
    return [{"cell": k, **degradation_row(bll, v, words)} for k, v in cells.items()]


def additivity(rows: Sequence[Mapping[str, Any]]) -> dict[str, float]:
    """``Σ_ℓ s_ℓ``, ``s_all`` and their ratio (NaN without an ``all`` row)."""
    per_layer = sum(float(r["sensitivity"]) for r in rows if r["cell"] != "all")
    everywhere = next((float(r["sensitivity"]) for r in rows if r["cell"] == "all"), math.nan)
    ratio = per_layer / everywhere if everywhere else math.nan
    return {"sum_of_layers": per_layer, "all_layers": everywhere, "ratio": ratio}


def mirror_windows(n: int) -> np.ndarray:
    """Index arrays ``[2n, n]`` into ``(q, reversed q)``: every shift of that ring."""
    return (np.arange(2 * n)[:, None] + np.arange(n)[None, :]) % (2 * n)


def _rank_corr(x: np.ndarray, y: np.ndarray) -> np.ndarray:
    """Spearman ρ of ``x [n]`` with each row of ``y [m, n]`` (average ranks for ties)."""
    rx = stats.rankdata(x)
    ry = stats.rankdata(y, axis=-1)
    rx = rx - rx.mean()
    ry = ry - ry.mean(axis=-1, keepdims=True)
    den = np.sqrt((rx**2).sum() * (ry**2).sum(axis=-1))
    with np.errstate(invalid="ignore", divide="ignore"):
        return (ry @ rx) / den


def shift_test(x: Sequence[float], y: Sequence[float]) -> dict[str, float]:
    """Spearman ``ρ(x, y)`` over layers and its mirror-ring shift p (module docstring).

    Layers where either value is NaN are dropped first; fewer than 4 left gives NaN."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    keep = np.isfinite(a) & np.isfinite(b)
    a, b = a[keep], b[keep]
    n = int(a.size)
    if n < 4 or np.ptp(a) == 0 or np.ptp(b) == 0:
        return {"rho": math.nan, "p": math.nan, "n_layers": n, "null_size": 0}
    null = _rank_corr(a, np.concatenate([b, b[::-1]])[mirror_windows(n)])
    rho = float(null[0])
    p = float(np.mean(np.abs(null) >= abs(rho) - 1e-12))
    return {"rho": rho, "p": p, "n_layers": n, "null_size": int(null.size)}


def change_test(x: Sequence[float], y: Sequence[float]) -> dict[str, float]:
    """:func:`shift_test` on first differences over layers (layers with a NaN neighbour
    drop out)."""
    return shift_test(np.diff(np.asarray(x, float)), np.diff(np.asarray(y, float)))


def naive_spearman_p(x: Sequence[float], y: Sequence[float]) -> float:
    """scipy's p for ``ρ`` (layers treated as independent), for comparison only."""
    return float(stats.spearmanr(x, y).pvalue)


def relation(
    sensitivity: Sequence[float], covariates: Mapping[str, Sequence[float]]
) -> list[dict[str, Any]]:
    """Per covariate (``name``: its ``[L]`` values): the levels test (:func:`shift_test`)
    with scipy's independence p beside it (``naive_p``, to show what the null changes),
    and the changes test (:func:`change_test`) as ``rho_changes``, ``p_changes``."""
    rows = []
    s = np.asarray(sensitivity, dtype=np.float64)
    for name, values in covariates.items():
        q = np.asarray(values, dtype=np.float64)
        row = {"covariate": name, **shift_test(s, q)}
        keep = np.isfinite(s) & np.isfinite(q)
        row["naive_p"] = naive_spearman_p(s[keep], q[keep]) if row["null_size"] else math.nan
        changes = change_test(s, q)
        row["rho_changes"], row["p_changes"] = changes["rho"], changes["p"]
        rows.append(row)
    return rows
