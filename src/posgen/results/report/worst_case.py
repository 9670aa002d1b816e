"""The report's worst-case panel (``posgen run --seeds K``, K > 1): per cell, the
degradation of each document's mean over its K perturbation draws beside that of its
worst draw (HELM's worst case; perdoc.parquet's ``delta_worst``).

Per cell on a task's primary metric scored per document, with ``g_d`` the document's
degradation (nats per word or byte for perplexities, the score's move toward worse for
means) and ``w_d`` its words or bytes (1 for means): ``mean = Σ w ḡ / Σ w`` over the
draws' mean ``ḡ_d``, ``worst = Σ w max_k g_dk / Σ w``; perplexities are shown as the
relative degradation ``exp(·) - 1`` (bits per byte as ``· / ln 2``), as in the rest of
the report. A corpus figure (BLEU, MCC) has no per-document degradation: not shown.
"""

from __future__ import annotations

import math
from typing import Any

from posgen.results.folder.config import RunConfig
from posgen.results.report.render import Block
from posgen.results.scores.metric_units import primary
from posgen.results.scores.scoring import collapse_seeds


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
    keys = ["model", "task", "kind", "scheme", "rate"]
    for task, specs in sorted(scores["metrics"].items()):
        spec = primary(specs)
        if spec is None or not spec.per_document:
            continue
        mine = docs[(docs["task"] == task) & (docs["metric"] == spec.metric)]
        mine = mine[mine["filter"] == spec.filter]
        for (model, _, kind, scheme, rate), g in mine.groupby(keys, sort=True):
            w = g["base_den"] if spec.log_scale else 1.0 + 0 * g["base_den"]
            mean = spec.ratio_sign() * (g["base_num"] / g["base_den"] - g["num"] / g["den"])
            values = [float((w * v).sum() / w.sum()) for v in (mean, g["delta_worst"])]
            shown = [_as_reported(spec.rule, v) for v in values]
            rows.append([model, task, spec.label, f"{kind} {scheme}", f"{rate:g}", *shown])
    return rows


def _as_reported(rule: str | None, v: float) -> str:
    """A per-document mean degradation as the report shows the rule's degradation."""
    if rule == "perplexity":
        return f"{math.expm1(v):+.4f}"
    return f"{v / math.log(2):+.4f}" if rule == "bits_per_byte" else f"{v:+.4f}"
