"""Scores: degradation with its CIs, position tolerance, fit quality, and
the cross-model correlation between them.

Degradation of a perturbed cell against its model's unperturbed baseline, on the same
documents ``d = 1..n``, ``> 0`` for worse (direction from lm-eval's ``higher_is_better``),
in the unit of :mod:`posgen.results.scores.metric_units`:

- perplexity rule (lm-eval's ``weighted_perplexity``, ``perplexity``):
  ``PPL = exp(-Σ_d ll_d / Σ_d w_d)`` and ``D = PPL_pert / PPL_base - 1`` (relative
  increase; 0.10 = 10 % higher perplexity);
- bits_per_byte: ``D = bpb_pert - bpb_base = log2(PPL_pert / PPL_base)`` on bytes;
- mean rule (``acc``, ``exact_match``, any score averaged over documents):
  ``D = mean_d(s_base) - mean_d(s_pert)`` (the drop), or its negative when lower is better;
- corpus metrics (bleu, mcc, ...): :mod:`posgen.results.scores.corpus`.

Intervals (:mod:`posgen.results.stats.intervals`; each row names its ``interval``):
perplexities get a t interval on ``log(1 + D)`` with its delta-method standard error
(``log-t``, default, or the bootstrap-t ``boot-t``; bits per byte the same, in bits),
0/1 scores the paired Agresti–Min interval, other means a paired t interval. The
percentile paired bootstrap (:func:`paired_bootstrap`) is kept for comparison only: at
12 documents it covers 85–89 % at nominal 95 %.

Several perturbation seeds per cell (``posgen run --seeds K``): the K draws of one
document are replicates of the same unit, so each document's sums are averaged over the
seeds first (:func:`collapse_seeds`), then the document-level interval is taken. The
variance of a document's average contains the draw variance divided by K, and the
between-document spread of the averages estimates exactly that total, so the interval
folds the draw's variance in without assuming it is zero or independent of the document.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from posgen.results.folder.config import Scoring
from posgen.results.folder.metrics import MetricSpec
from posgen.results.scores.metric_units import measurable, primary, threshold, unit_of
from posgen.results.stats.intervals import agresti_min, paired_t, ratio_interval, wilson
from posgen.results.stats.resampling import resample_counts
from posgen.results.tables.documents import aggregate

GROUP = ["model", "task", "metric", "filter", "kind", "scheme", "seed"]
SPEC = ["aggregation", "higher_is_better"]  # carried with every row of a (metric, filter)


def degradation(
    rule: str,
    base_num: np.ndarray,
    base_den: np.ndarray,
    num: np.ndarray,
    den: np.ndarray,
    higher_is_better: bool | None = None,
) -> np.ndarray:
    """``D`` over the last axis (documents); inputs ``[..., n]`` -> ``[...]``.

    ``higher_is_better`` None: the rule's usual direction (lower perplexity, higher mean).
    """
    if higher_is_better is None:
        higher_is_better = rule == "mean"
    base, pert = aggregate(rule, base_num, base_den), aggregate(rule, num, den)
    if rule == "perplexity":
        return base / pert - 1.0 if higher_is_better else pert / base - 1.0
    return base - pert if higher_is_better else pert - base


def paired_bootstrap(
    rule: str,
    base_num: Sequence[float],
    base_den: Sequence[float],
    num: Sequence[float],
    den: Sequence[float],
    *,
    iters: int = 2000,
    confidence: float = 0.95,
    seed: int = 0,
    key: str = "",
    higher_is_better: bool | None = None,
) -> dict[str, float]:
    """Point estimate, percentile CI and bootstrap stderr of ``D`` on paired documents."""
    arrays = [np.asarray(a, dtype=np.float64) for a in (base_num, base_den, num, den)]
    n = len(arrays[0])
    if any(len(a) != n for a in arrays):
        raise ValueError("paired arrays must have the same length")
    point = float(degradation(rule, *arrays, higher_is_better))
    counts = resample_counts(n, iters, seed, key)  # [iters, n]
    reps = degradation(rule, *(counts * a for a in arrays), higher_is_better)  # [iters]
    alpha = (1.0 - confidence) / 2.0
    lo, hi = np.quantile(reps, [alpha, 1.0 - alpha])
    return {
        "degradation": point,
        "ci_lo": float(lo),
        "ci_hi": float(hi),
        "stderr": float(np.std(reps, ddof=1)),
        "n": n,
    }


def collapse_seeds(perdoc):
    """Average each document's sums over the perturbation seeds of its cell.

    ``[model, task, metric, filter, kind, scheme, rate, doc_key]`` keys one output row;
    ``seed`` becomes the smallest seed and ``n_seeds`` counts the draws averaged. With one
    seed per cell the table is unchanged (plus ``n_seeds = 1``).
    """
    keys = [c for c in GROUP if c != "seed"] + ["rate", "doc_key", *SPEC]
    cols = ["base_num", "base_den", "num", "den"]
    agg: dict[str, Any] = {c: "mean" for c in cols} | {"seed": "min"}
    if "delta_worst" in perdoc.columns:  # the same on every seed's row of a document
        agg["delta_worst"] = "max"
    if "choice" in perdoc.columns:  # 1 when the predicted choice is unchanged, NaN: unknown
        known = (perdoc["choice"] >= 0) & (perdoc["base_choice"] >= 0)
        same = (perdoc["choice"] == perdoc["base_choice"]).astype(float)
        perdoc = perdoc.assign(unchanged=same.where(known))
        agg["unchanged"] = lambda v: v.mean() if v.notna().all() else math.nan
    out = perdoc.groupby(keys, sort=True).agg(agg)
    out["n_seeds"] = perdoc.groupby(keys, sort=True)["seed"].nunique()
    return out.reset_index()


def value_shapes(perdoc) -> dict[tuple[str, str, str], tuple[bool, bool]]:
    """Per (task, metric, filter): whether every per-document value (baseline and
    perturbed, every model and seed) lies in [0, 1], and whether each is 0 or 1."""
    out = {}
    for key, g in perdoc.groupby(["task", "metric", "filter"], sort=True):
        v = np.concatenate(
            [(g["base_num"] / g["base_den"]).to_numpy(), (g["num"] / g["den"]).to_numpy()]
        )
        out[key] = (bool(((v >= 0) & (v <= 1)).all()), bool(np.isin(v, (0.0, 1.0)).all()))
    return out


def cell_interval(spec: MetricSpec, unit: str, binary: bool, g, cfg: Scoring, key: str) -> dict:
    """Degradation, interval (and its name), stderr and n of one cell's per-document rows
    ``g`` of a metric scored per document (module doc)."""
    cols = [g[c].to_numpy(np.float64) for c in ("base_num", "base_den", "num", "den")]
    if spec.log_scale:
        worse_first = cols if not spec.higher_is_better else [*cols[2:], *cols[:2]]
        r = ratio_interval(
            *worse_first,
            method=cfg.interval,
            confidence=cfg.confidence,
            iters=cfg.iters,
            seed=cfg.seed,
            key=key,
        )
        if spec.rule == "bits_per_byte":  # log2 of the byte-perplexity ratio
            r = {
                **r,
                **{k: math.log2(1.0 + r[k]) for k in ("degradation", "ci_lo", "ci_hi")},
                "stderr": r["stderr"] / (1.0 + r["degradation"]) / math.log(2),
            }
        return {**r, "interval": cfg.interval}
    base, pert = cols[0] / cols[1], cols[2] / cols[3]
    if not spec.higher_is_better:  # the worse direction is up: measure the rise
        base, pert = (1.0 - base, 1.0 - pert) if unit == "fraction" else (-base, -pert)
    if unit == "fraction" and binary:
        return {**agresti_min(base, pert, cfg.confidence), "interval": "agresti-min"}
    return {**paired_t(base - pert, cfg.confidence), "interval": "paired-t"}


CONSISTENCY = ("consistency", "consistency_lo", "consistency_hi")
DEGRADATION_COLUMNS = [
    *GROUP,
    "rate",
    *SPEC,
    "unit",
    "interval",
    "degradation",
    "ci_lo",
    "ci_hi",
    "stderr",
    "n",
    "baseline",
    "n_seeds",
    *CONSISTENCY,
]


def degradation_table(perdoc, cfg: Scoring | None = None):
    """One row per perturbed cell and per-document metric: degradation in its unit, CI,
    stderr, n, the unperturbed figure, n_seeds and the consistency rate."""
    cfg = cfg or Scoring()
    import pandas as pd

    rows = []
    shapes = value_shapes(perdoc)
    docs = collapse_seeds(perdoc)
    keys_ = [c for c in GROUP if c != "seed"] + ["rate", *SPEC]
    for keys, g in docs.groupby(keys_, sort=True):
        rec = dict(zip(keys_, keys, strict=True))
        rec["seed"] = int(g["seed"].min())
        key = "|".join(str(rec[k]) for k in [*GROUP, "rate"])
        spec = MetricSpec(
            rec["metric"], rec["filter"], rec["aggregation"], bool(rec["higher_is_better"])
        )
        in_unit, binary = shapes[(rec["task"], rec["metric"], rec["filter"])]
        unit = unit_of(spec.rule or "", in_unit)
        stats = cell_interval(spec, unit, binary, g, cfg, key)
        base = aggregate(spec.rule, g["base_num"].to_numpy(float), g["base_den"].to_numpy(float))
        rows.append(
            {
                **rec,
                **stats,
                "unit": unit,
                "baseline": float(base),
                "n_seeds": int(g["n_seeds"].max()),
                **consistency(g, cfg.confidence),
            }
        )
    return pd.DataFrame(rows, columns=DEGRADATION_COLUMNS)


def consistency(g, confidence: float = 0.95) -> dict[str, float]:
    """Share of documents whose predicted choice is unchanged under the perturbation,
    with its Wilson interval (documents independent; with several seeds a document
    counts its share of unchanged draws). NaN where choices are not known."""

    u = g["unchanged"].to_numpy(float) if "unchanged" in g.columns else np.array([math.nan])
    if u.size == 0 or not np.isfinite(u).all():
        return dict.fromkeys(CONSISTENCY, math.nan)
    lo, hi = wilson(float(u.sum()), u.size, confidence)
    return {"consistency": float(u.mean()), "consistency_lo": lo, "consistency_hi": hi}


def tolerance(rates: Sequence[float], values: Sequence[float], threshold: float) -> dict:
    """Tolerance of one degradation curve (the baseline point (0, 0) is added).

    - ``tolerance``: the largest grid rate r such that ``D(r') <= threshold`` for every
      grid rate ``r' <= r`` (0 when the first perturbed rate already exceeds it);
    - ``crossing``: where the piecewise-linear curve first exceeds the threshold, or
      ``None`` when it never does on the grid (censored at the largest rate);
    - ``auc``: trapezoidal area under ``D(r)`` on ``[0, r_max]`` divided by ``r_max`` (the
      mean degradation over the swept range; same units as ``D``).
    """
    order = np.argsort(np.asarray(rates, dtype=np.float64), kind="stable")
    r = np.concatenate([[0.0], np.asarray(rates, dtype=np.float64)[order]])
    d = np.concatenate([[0.0], np.asarray(values, dtype=np.float64)[order]])
    if r[1:].size == 0 or r[1] <= 0.0:
        raise ValueError("tolerance needs at least one rate > 0 (rate 0 is the baseline)")
    over = np.nonzero(d > threshold)[0]
    tol = float(r[-1]) if over.size == 0 else float(r[over[0] - 1])
    crossing = None
    if over.size:
        i = over[0]
        frac = (threshold - d[i - 1]) / (d[i] - d[i - 1])
        crossing = float(r[i - 1] + frac * (r[i] - r[i - 1]))
    auc = float(np.trapezoid(d, r) / r[-1])
    return {"tolerance": tol, "crossing": crossing, "auc": auc, "max_rate": float(r[-1])}


TOLERANCE_COLUMNS = [
    *GROUP,
    *SPEC,
    "unit",
    "threshold",
    "tolerance",
    "tolerance_lo",
    "tolerance_hi",
    "crossing",
    "auc",
    "max_rate",
    "baseline",
    "measurable",
]


def tolerance_table(degr, cfg: Scoring | None = None):
    """Per (model, task, metric, filter, kind, scheme, seed): tolerance, its range over
    the CI (``tolerance_lo`` from the upper CI bound, ``tolerance_hi`` from the lower),
    crossing and AUC, the threshold in the curve's unit, the baseline value, and
    ``measurable`` (:func:`posgen.results.scores.metric_units.measurable`)."""
    import pandas as pd

    cfg = cfg or Scoring()
    rows = []
    for keys, g in degr.groupby([*GROUP, *SPEC, "unit"], sort=True):
        rec = dict(zip([*GROUP, *SPEC, "unit"], keys, strict=True))
        base = float(g["baseline"].iloc[0])
        thr = threshold(cfg, rec["unit"], base)
        main = tolerance(g["rate"], g["degradation"], thr)
        rows.append(
            {
                **rec,
                **main,
                "threshold": thr,
                "tolerance_lo": tolerance(g["rate"], g["ci_hi"], thr)["tolerance"],
                "tolerance_hi": tolerance(g["rate"], g["ci_lo"], thr)["tolerance"],
                "baseline": base,
                "measurable": measurable(rec["unit"], bool(rec["higher_is_better"]), base, thr),
            }
        )
    return pd.DataFrame(rows, columns=TOLERANCE_COLUMNS)


FIT_COLUMNS = ("r_3axis", "r_2axis", "r_distance_key")


def fit_quality(decomp) -> dict[str, float]:
    """Mean per-head fit quality of a decomposition table.

    Per-(doc, layer, head) values are first averaged over documents for each head, then
    over heads: ``mean_h mean_d r_{d,h}``. Returns ``r_3axis``, ``r_2axis``,
    ``r_distance_key`` (NaN for an absent column) and ``n_heads``. A table with a
    ``logit_part`` column (an ALiBi model's: ``full`` logits and the content part ``qk``)
    counts its full logits only, the ones the model's softmax sees.
    """
    if "logit_part" in decomp.columns:
        decomp = decomp[decomp["logit_part"] == "full"]
    heads = [c for c in ("layer", "head") if c in decomp.columns]
    if not heads:
        raise ValueError("decomposition table needs 'layer' and 'head' columns")
    present = [c for c in FIT_COLUMNS if c in decomp.columns]
    if "r_3axis" not in present:
        raise ValueError("decomposition table has no r_3axis column")
    per_head = decomp.groupby(heads)[present].mean()
    out = {c: float(per_head[c].mean()) if c in present else math.nan for c in FIT_COLUMNS}
    return {**out, "n_heads": len(per_head)}


def model_summary(
    tol, fits: Mapping[str, Mapping[str, float]], metrics: Mapping[str, Sequence[MetricSpec]]
) -> dict[str, dict]:
    """Per (task, kind): ``{model: {r_3axis, ..., tolerance, tolerance_interp, auc}}`` on
    each task's primary metric (``metrics``: each task's (metric, filter) descriptions);
    ``tolerance_interp`` is the crossing, or the largest rate when the curve never crosses
    (censored)."""
    out: dict[str, dict] = {}
    for (task, kind), g in tol.groupby(["task", "kind"], sort=True):
        spec = primary(metrics.get(task, ()))
        if spec is None:
            continue
        per_model = {}
        rows = g[(g["metric"] == spec.metric) & (g["filter"] == spec.filter)]
        for row in rows.itertuples(index=False):
            if not row.measurable:  # no tolerance to relate to fit quality (see measurable)
                continue
            interp = (
                row.crossing
                if row.crossing is not None and np.isfinite(row.crossing)
                else row.max_rate
            )
            per_model.setdefault(row.model, {}).update(
                {
                    "tolerance": row.tolerance,
                    "tolerance_interp": float(interp),
                    "auc": row.auc,
                    "scheme": row.scheme,
                    "metric": spec.metric,
                    "filter": spec.filter,
                    **dict(fits.get(row.model, {})),
                }
            )
        out[f"{task}|{kind}"] = per_model
    return out
