"""The report's worst-case panel (``posgen run --seeds K``, K > 1): per cell, the
degradation of each document's mean over its K perturbation draws beside that of its
worst draw (HELM's worst case; perdoc.parquet's ``delta_worst``).

Per cell on a task's primary metric, with ``g_d`` the document's degradation (nats per
word for perplexities, the score drop for accuracy) and ``w_d`` its words (1 for
accuracy): ``mean = Σ w ḡ / Σ w`` over the draws' mean ``ḡ_d``, ``worst = Σ w max_k g_dk
/ Σ w``; perplexities are shown as the relative degradation ``exp(·) - 1``, as in the
rest of the report.
"""

from __future__ import annotations

import math
from typing import Any

from posgen.results.folder.config import RunConfig
from posgen.results.folder.schema import METRIC_RULES
from posgen.results.report.render import Block
from posgen.results.scores.scoring import collapse_seeds, primary_metric


def worst_case_blocks(cfg: RunConfig, scores: dict[str, Any]) -> list[Block]:
    """The panel, or nothing with one seed per cell."""
    seeds = cfg.seeds
    if seeds < 2:
        return []
    head = ["model", "task", "metric", "perturbation", "rate/σ", "mean over seeds", "worst"]
    return [
        ("h", 2, f"Mean and worst case over {seeds} seeds"),
        (
            "p",
            "Each document's degradation averaged over its perturbation draws, beside its "
            "worst draw (the largest degradation of the document over the seeds), "
            "aggregated over the documents the same way. `posgen check --statistic worst` "
            "gates on the worst.",
        ),
        ("table", head, worst_case_rows(scores)),
    ]


def worst_case_rows(scores: dict[str, Any]) -> list[list[str]]:
    docs = collapse_seeds(scores["perdoc"])
    rows = []
    keys = ["model", "task", "metric", "kind", "scheme", "rate"]
    for (model, task, metric, kind, scheme, rate), g in docs.groupby(keys, sort=True):
        if metric != primary_metric(sorted(set(docs[docs["task"] == task]["metric"]))):
            continue
        ppl = METRIC_RULES[metric] == "perplexity"
        w = g["base_den"] if ppl else 1.0 + 0 * g["base_den"]
        mean = g["base_num"] / g["base_den"] - g["num"] / g["den"]
        values = [float((w * v).sum() / w.sum()) for v in (mean, g["delta_worst"])]
        shown = [f"{math.expm1(v):+.4f}" if ppl else f"{v:+.4f}" for v in values]
        rows.append([model, task, metric, f"{kind} {scheme}", f"{rate:g}", *shown])
    return rows
