"""Degradation of corpus metrics: figures lm-eval computes over the whole set of documents.

BLEU, chrF, TER, MCC and corpus F1 are not averages of per-document numbers, so the
paired per-document machinery does not apply. On the ``n`` documents a perturbed cell
shares with its baseline (items ``x_d`` logged by lm-eval, e.g. ``[reference,
prediction]``), with ``A`` lm-eval's own aggregation function and ``s = +1`` when higher is
better (else ``-1``):

    D = s · (A(x_base) - A(x_pert))            (> 0: worse, in the metric's own units)

With several perturbation seeds ``D`` is the mean of the seeds' ``D_k`` (the same
baseline). Interval: a paired document bootstrap, seeded through posgen's resampling
(:func:`posgen.results.stats.resampling.resample_counts`): each of ``B`` replicates draws
``n`` documents with replacement, the same draw for the baseline and every seed, and
recomputes ``D`` with ``A`` on the drawn items; the interval is the replicates'
percentile range and ``stderr`` their standard deviation. ``B`` is ``min(iters,``
:data:`CORPUS_ITERS` ``)``: each replicate recomputes lm-eval's figure twice per seed
(2–10 ms a call for sklearn's MCC and F1 and sacrebleu's BLEU, chrF and TER; lm-eval
itself stops at 100 replicates for its corpus metrics' stderr), so the 2.5 % tails rest on
5 replicates each and the bounds move a little with the bootstrap seed.
Assumptions: documents independent; the percentile interval is the only one available
for a figure of the whole corpus, and at n ≤ 24 documents it covers less than its
nominal level (≈ .85–.92 at 95 % for a mean, notes on the scores' intervals): read it as
a little short.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

from posgen.results.folder.config import Scoring
from posgen.results.scores.scoring import DEGRADATION_COLUMNS
from posgen.results.stats.resampling import resample_counts
from posgen.results.tables.documents import corpus_replicates, corpus_value
from posgen.results.tables.metric_list import Aggregations

CORPUS_ITERS = 200
CELL = ("model", "task", "metric", "filter", "kind", "scheme", "rate")


def corpus_table(
    pairs: Iterable[Mapping[str, Any]],
    cfg: Scoring | None = None,
    aggregations: Aggregations | None = None,
):
    """One degradation row per perturbed cell and corpus metric (the columns of
    :func:`posgen.results.scores.scoring.degradation_table`; ``pairs`` from
    :func:`posgen.results.tables.tidy.corpus_pairs`), and the (model, task, metric,
    reason) of every corpus metric whose aggregation function could not be loaded now."""
    import pandas as pd

    cfg = cfg or Scoring()
    aggregations = aggregations or Aggregations()
    cells: dict[tuple, list[Mapping[str, Any]]] = {}
    for p in pairs:
        spec = p["spec"]
        key = (p["model"], p["task"], spec.metric, spec.filter, p["kind"], p["scheme"], p["rate"])
        cells.setdefault(key, []).append(p)
    rows, missing = [], {}
    for key, draws in sorted(cells.items(), key=str):
        spec = draws[0]["spec"]
        fn = aggregations.function(key[1], spec)
        if fn is None:
            missing[(key[0], key[1], spec.label)] = aggregations.why(key[1], spec)
            continue
        rows.append(_cell_row(key, draws, cfg, fn))
    problems = [
        {"model": m, "task": t, "metric": label, "reason": why, "cells": 0}
        for (m, t, label), why in sorted(missing.items())
    ]
    return pd.DataFrame(rows, columns=DEGRADATION_COLUMNS), problems


def _cell_row(key: tuple, draws: list[Mapping[str, Any]], cfg: Scoring, fn) -> dict[str, Any]:
    spec = draws[0]["spec"]
    keys = draws[0]["keys"]
    if any(d["keys"] != keys for d in draws):
        raise ValueError(f"{'/'.join(map(str, key))}: the seeds scored different documents")
    n = len(keys)
    sign = 1.0 if spec.higher_is_better else -1.0
    base = corpus_value(fn, draws[0]["base_items"])
    point = float(np.mean([sign * (base - corpus_value(fn, d["items"])) for d in draws]))
    stats = {"ci_lo": math.nan, "ci_hi": math.nan, "stderr": math.nan}
    if n >= 2:
        iters = min(cfg.iters, CORPUS_ITERS)
        counts = resample_counts(n, iters, cfg.seed, "corpus|" + "|".join(map(str, key)))
        base_reps = corpus_replicates(fn, draws[0]["base_items"], counts)  # [B]
        reps = np.mean(
            [sign * (base_reps - corpus_replicates(fn, d["items"], counts)) for d in draws],
            axis=0,
        )
        alpha = (1.0 - cfg.confidence) / 2.0
        finite = reps[np.isfinite(reps)]
        if finite.size:
            lo, hi = np.quantile(finite, [alpha, 1.0 - alpha])
            stats = {
                "ci_lo": float(lo),
                "ci_hi": float(hi),
                "stderr": float(np.std(finite, ddof=1)),
            }
    return {
        **dict(zip(CELL, key, strict=True)),
        "seed": int(min(d["seed"] for d in draws)),
        "aggregation": spec.aggregation,
        "higher_is_better": bool(spec.higher_is_better),
        "unit": "metric",
        "interval": "bootstrap-percentile",
        "degradation": point,
        **stats,
        "n": n,
        "baseline": base,
        "n_seeds": len({d["seed"] for d in draws}),
        "consistency": math.nan,
        "consistency_lo": math.nan,
        "consistency_hi": math.nan,
    }
