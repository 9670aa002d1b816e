"""Each model's tolerance under document resampling, drawn jointly across models.

A model's continuous tolerance figures (the interpolated crossing ``tolerance_interp``
and ``auc``, see :func:`posgen.results.scores.scoring.tolerance`) are estimates from the same
``n`` documents of a task. Resampling those documents with replacement (one count
vector ``c ∈ ℕ^n`` per replicate, the SAME for every model, so documents that are hard
for every model stay shared) and recomputing every cell's ``D`` from the resampled sums
gives ``B`` replicates of each model's curve, hence of its figures.

Used two ways: a percentile band of each model's figure (descriptive: how far it moves
when the documents are redrawn), and the spread of the cross-model correlation over the
same replicates, which carries every model's tolerance uncertainty into the relation.
Shapes: per (model, task, metric, filter, kind, scheme) arrays ``[B]`` per figure. Metrics
scored per document only: a corpus figure (bleu, mcc) would need lm-eval's aggregation
recomputed for every rate of every replicate, and has no band.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from posgen.results.folder.metrics import MetricSpec
from posgen.results.scores.metric_units import threshold, unit_of
from posgen.results.scores.scoring import SPEC, collapse_seeds, degradation, tolerance, value_shapes
from posgen.results.stats.resampling import resample_counts
from posgen.results.tables.documents import aggregate

FIGURES = ("tolerance_interp", "auc")
KEYS = ["model", "task", "metric", "filter", "kind", "scheme"]


def resampled_figures(
    perdoc, cfg, iters: int = 200, only: set[tuple[str, str, str]] | None = None
) -> dict[tuple, dict[str, np.ndarray]]:
    """``{(model, task, metric, filter, kind, scheme): {"tolerance_interp": [B], "auc": [B]}}``.

    ``perdoc`` is the per-document table (several seeds are averaged per document
    first); documents are drawn per task with one count matrix shared by all models.
    ``only``: the (task, metric, filter) curves wanted (each task's primary metric, whose
    tolerance enters the cross-model relation); all when None.
    """
    if only is not None:
        wanted = [
            (t, m, f) in only
            for t, m, f in zip(perdoc["task"], perdoc["metric"], perdoc["filter"], strict=True)
        ]
        perdoc = perdoc[np.array(wanted, dtype=bool)]  # a list of none would pick columns
    docs = collapse_seeds(perdoc)
    shapes = value_shapes(perdoc)
    counts = {}
    for task, g in docs.groupby("task", sort=True):
        keys = sorted(set(g["doc_key"]))
        counts[task] = (keys, resample_counts(len(keys), iters, cfg.seed, f"relation|{task}"))
    out: dict[tuple, dict[str, np.ndarray]] = {}
    for key, g in docs.groupby([*KEYS, *SPEC], sort=True):
        keys, c = counts[key[1]]
        arr = _curve_arrays(g, keys)
        if arr is None:
            continue  # documents differ between rates: no joint resample
        rates, sums = arr  # [R], 4 x [R, n]
        spec = MetricSpec(key[2], key[3], key[6], bool(key[7]))
        d = degradation(spec.rule, *(c[:, None, :] * s[None] for s in sums), spec.higher_is_better)
        base = float(aggregate(spec.rule, sums[0][0], sums[1][0]))  # the unperturbed figure
        unit = unit_of(spec.rule, shapes[(key[1], key[2], key[3])][0])
        thr = threshold(cfg, unit, base)
        figs = [tolerance(rates, row, thr) for row in d]
        out[key[:6]] = {
            "tolerance_interp": np.array(
                [f["max_rate"] if f["crossing"] is None else f["crossing"] for f in figs]
            ),
            "auc": np.array([f["auc"] for f in figs]),
        }
    return out


def _curve_arrays(g, keys: list[str]) -> tuple[np.ndarray, list[np.ndarray]] | None:
    cols = ("base_num", "base_den", "num", "den")
    piv = {c: g.pivot_table(index="rate", columns="doc_key", values=c) for c in cols}
    if list(piv["num"].columns) != keys or piv["num"].isna().any().any():
        return None
    return piv["num"].index.to_numpy(float), [piv[c][keys].to_numpy(float) for c in cols]


def band(values: np.ndarray, confidence: float = 0.95) -> tuple[float, float]:
    """Percentile band ``[q_{α/2}, q_{1-α/2}]`` of replicates ``[B]``."""
    a = (1 - confidence) / 2
    lo, hi = np.quantile(values, [a, 1 - a])
    return float(lo), float(hi)


def relation_spread(
    x: dict[str, float], reps: dict[str, np.ndarray], method: str, confidence: float = 0.95
) -> dict[str, Any]:
    """Correlation of fixed ``x`` with each replicate of ``y`` across the models in
    ``reps``: its band and the share of replicates with the sign of the median."""
    from scipy import stats

    names = sorted(reps)
    xs = np.array([x[m] for m in names])
    ys = np.stack([reps[m] for m in names], axis=1)  # [B, n]
    fn = stats.spearmanr if method == "spearman" else stats.pearsonr
    rs = np.array([fn(xs, row)[0] if np.ptp(row) > 0 else np.nan for row in ys])
    rs = rs[np.isfinite(rs)]
    if rs.size == 0:
        return {"band": [None, None], "same_sign": None}
    lo, hi = band(rs, confidence)
    sign = np.sign(np.median(rs))
    return {"band": [lo, hi], "same_sign": float(np.mean(np.sign(rs) == sign))}
