"""The perturbed cells in the CI gate: each cell's per-document degradation.

Per (task, primary metric, kind, scheme, rate) cell of one model, from the per-document
pairs of :func:`posgen.results.tables.tidy.perdoc_rows`: ``g_d``, the document's
degradation (``base_num/base_den - num/den`` for a metric better when higher: nats per
word or byte for perplexities, the score drop for accuracy; the sign turned for one
better when lower, :data:`posgen.results.gate.margins.METRICS`), averaged over the run's
perturbation seeds (:func:`posgen.results.scores.scoring.collapse_seeds`), its largest
value over them ``g_worst``, and its weight ``w_d`` (words or bytes; 1 for accuracy).
"""

from __future__ import annotations

import math
from typing import Any

from posgen.results.gate.baseline_file import KEY
from posgen.results.gate.margins import higher_is_better


def gate_cells(perdoc) -> list[dict[str, Any]]:
    """Per primary-metric perturbed cell of one model's ``perdoc`` rows
    (:func:`posgen.results.tables.tidy.perdoc_rows`): its per-document ``g``, ``g_worst``
    and ``w`` (see the module doc), documents sorted by key."""
    from posgen.results.folder.schema import METRIC_RULES
    from posgen.results.scores.scoring import collapse_seeds, primary_metric

    out = []
    for task, t in perdoc.groupby("task", sort=True):
        metric = primary_metric(sorted(set(t["metric"])))
        if metric is None:
            continue
        sign = 1.0 if higher_is_better(metric) else -1.0
        rows = t[t["metric"] == metric]
        by_doc = [rows["kind"], rows["scheme"], rows["rate"], rows["doc_key"]]
        worst = (sign * rows["delta"]).groupby(by_doc, sort=True).max()  # largest g over seeds
        docs = collapse_seeds(rows.drop(columns=["choice", "base_choice"], errors="ignore"))
        for (kind, scheme, rate), g in docs.groupby(["kind", "scheme", "rate"], sort=True):
            g = g.sort_values("doc_key")
            gd = sign * (g["base_num"] / g["base_den"] - g["num"] / g["den"])
            w = g["base_den"].tolist() if METRIC_RULES[metric] == "perplexity" else [1.0] * len(g)
            out.append(
                {
                    "task": task,
                    "metric": metric,
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
    return out


def cell_summaries(cells: list[dict[str, Any]], scores: dict[str, Any], model: str) -> None:
    """Add each cell's degradation, its interval and n from the run's scores (shown,
    not tested: ``posgen check`` reads the documents)."""
    degr = scores["degradation"]
    degr = degr[degr["model"] == model].set_index(list(KEY))
    for cell in cells:
        rec = degr.loc[tuple(cell[k] for k in KEY)]
        cell["degradation"] = float(rec["degradation"])
        cell["ci_lo"], cell["ci_hi"] = _finite(rec["ci_lo"]), _finite(rec["ci_hi"])
        cell["n"] = int(rec["n"])


def _finite(x: Any) -> float | None:
    return float(x) if math.isfinite(float(x)) else None
