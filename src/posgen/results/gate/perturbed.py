"""The perturbed cells in the CI gate: each cell's per-document degradation.

Per (task, primary metric, kind, scheme, rate) cell of one model, from the per-document
pairs of :func:`posgen.results.tables.tidy.perdoc_rows`: ``g_d``, the document's
degradation (the ``delta`` of those pairs: ``s (base_num/base_den - num/den)`` with
``s = +1`` when a larger per-document value is better, the log-likelihood per word or
byte of a perplexity metric or a score, else ``-1``; nats per word or byte for
perplexities, the score drop for a [0, 1] score), averaged over the run's perturbation
seeds (:func:`posgen.results.scores.scoring.collapse_seeds`), its largest value over them
``g_worst``, and its weight ``w_d`` (words or bytes; 1 for a score).

A task's primary metric is its first scorable (metric, filter) in lm-eval's order
(:func:`posgen.results.scores.metric_units.primary`); the scale it is gated on follows
from its aggregation (:func:`posgen.results.gate.margins.gate_scale`). A task whose
primary metric cannot be gated (a corpus figure, a mean of unbounded values) is listed
in ``not_gated`` with the reason, never dropped silently.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from posgen.results.folder.metrics import split_key
from posgen.results.gate.baseline_file import KEY
from posgen.results.gate.margins import gate_scale
from posgen.results.scores.metric_units import primary
from posgen.results.scores.scoring import collapse_seeds


def gate_cells(
    perdoc, specs: Mapping[str, Sequence[Any]]
) -> tuple[list[dict[str, Any]], list[dict[str, str]]]:
    """The gated cells of one model's ``perdoc`` rows
    (:func:`posgen.results.tables.tidy.perdoc_rows`) with each task's metric ``specs``
    (:func:`posgen.results.tables.tidy.task_metrics`): per perturbed cell its
    per-document ``g``, ``g_worst`` and ``w`` (see the module doc), documents sorted by
    key; and ``{"task", "metric", "reason"}`` per task whose primary metric is not gated."""

    out, not_gated = [], []
    for task in sorted(specs):
        spec = primary(specs[task])
        if spec is None:
            continue  # refused when the run was made: no metric posgen can score
        t = perdoc[
            (perdoc["task"] == task)
            & (perdoc["metric"] == spec.metric)
            & (perdoc["filter"] == spec.filter)
        ]
        values = [*(t["base_num"] / t["base_den"]), *(t["num"] / t["den"])]
        scale, why = gate_scale(spec, values)
        if scale is None:
            not_gated.append({"task": task, "metric": spec.label, "reason": why})
            continue
        worst = t.groupby(["kind", "scheme", "rate", "doc_key"], sort=True)["delta"].max()
        docs = collapse_seeds(t.drop(columns=["choice", "base_choice"], errors="ignore"))
        for (kind, scheme, rate), g in docs.groupby(["kind", "scheme", "rate"], sort=True):
            g = g.sort_values("doc_key")
            gd = spec.ratio_sign() * (g["base_num"] / g["base_den"] - g["num"] / g["den"])
            w = g["base_den"].tolist() if scale == "perplexity" else [1.0] * len(g)
            out.append(
                {
                    "task": task,
                    "metric": spec.label,
                    "lm_eval_key": spec.key,
                    "scale": scale,
                    "kind": kind,
                    "scheme": scheme,
                    "rate": float(rate),
                    "docs": {
                        "keys": g["doc_key"].astype(str).tolist(),
                        "w": [float(x) for x in w],
                        "g": [float(x) for x in gd],
                        "g_worst": [float(worst[(kind, scheme, rate, k)]) for k in g["doc_key"]],
                    },
                }
            )
    return out, not_gated


def cell_summaries(cells: list[dict[str, Any]], scores: dict[str, Any], model: str) -> None:
    """Add each cell's degradation, its interval and n from the run's scores (shown,
    not tested: ``posgen check`` reads the documents)."""

    degr = scores["degradation"]
    degr = degr[degr["model"] == model]
    for cell in cells:
        metric, filt = split_key(cell["lm_eval_key"])
        mine = degr[(degr["metric"] == metric) & (degr["filter"] == filt)]
        rec = mine.set_index(list(KEY)).loc[(cell["task"], metric, *(cell[k] for k in KEY[2:]))]
        cell["degradation"] = float(rec["degradation"])
        cell["ci_lo"], cell["ci_hi"] = _finite(rec["ci_lo"]), _finite(rec["ci_hi"])
        cell["n"] = int(rec["n"])


def _finite(x: Any) -> float | None:
    return float(x) if math.isfinite(float(x)) else None
