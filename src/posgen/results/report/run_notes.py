"""The run report's prose: its header (versions, seeds, the sweep, the models), the notes
on documents left out of perplexity ratios and on metrics not scored, how to read the
degradation table, and what the report does not show."""

from __future__ import annotations

from typing import Any

from posgen.results.folder.config import RunConfig
from posgen.results.folder.metrics import MetricSpec
from posgen.results.report.render import Block

UNITS_TEXT = (
    "Degradation > 0 is worse (the direction is lm-eval's higher_is_better for the "
    "metric), in the unit beside it: relative (perplexity ratio - 1), bits/byte, [0, 1] "
    "(a score on [0, 1]: x 100 = points) or own (the metric's own units: BLEU or chrF "
    "points, MCC, ...). The interval's method follows the CI: log-t or boot-t "
    "(perplexities), agresti-min (0/1 scores), paired-t (other scores averaged over "
    "documents), bootstrap-percentile (corpus figures such as BLEU or MCC, recomputed "
    "with lm-eval's own aggregation on resampled documents)."
)

REALISED_TEXT = (
    "Realised = what the perturbation really did in the cell, beside the nominal rate: "
    "for text cells the mean share of words moved per document and the documents in "
    "which anything moved; for position cells the same per model input row (tokens); "
    "for feature cells the mean |Δposition| per token (rope_noise) or none (qk_noise "
    "moves no position). A cell marked NOTHING MOVED scored unperturbed input: its "
    "degradation says nothing about the rate."
)


def cfg_models(cfg: RunConfig) -> list[str]:
    return [m.label for m in cfg.models]


def header_blocks(cfg: RunConfig) -> list[Block]:
    rows = [
        [m.label, m.path, m.revision, m.dtype, "yes" if m.random_init else "no"] for m in cfg.models
    ]
    twin_seed = cfg.seed if cfg.random_init_seed is None else cfg.random_init_seed
    facts = [
        f"posgen {cfg.posgen_version}, lm-eval {cfg.lm_eval_version}"
        f", results schema v{cfg.schema_version}.",
        f"Suite: {cfg.suite} (version {cfg.suite_version}); tasks "
        f"{', '.join(cfg.tasks)}; documents per task (limit): {dict(cfg.limits)}.",
        f"Seeds: perturbation {cfg.seed}, bootstrap {cfg.scoring.seed}, random-init "
        f"weights {twin_seed}.",
        f"Sweep: {sweep_text(cfg)}.",
    ]
    out: list[Block] = [
        ("p", " ".join(facts)),
        ("table", ["model", "loaded from", "revision", "dtype", "random init"], rows),
    ]
    if any(m.embedded for m in cfg.models):
        out.append(
            (
                "p",
                "Caveat: the embedded model is SmolLM2-135M-Instruct dequantized from "
                "a 4-bit (Q4_1) GGUF copy; its figures differ a little from the "
                "full-precision checkpoint.",
            )
        )
    return out


def sweep_text(cfg: RunConfig) -> str:
    parts = []
    for kind in ("text", "position", "feature"):
        axis = cfg.sweep.get(kind)
        if axis:
            parts.append(f"{kind} {'/'.join(axis.schemes)} at {list(axis.values)}")
    return "; ".join(parts) or "?"


def excluded_blocks(cells: list[dict[str, Any]]) -> list[Block]:
    """A note of the documents left out of perplexity ratios (no words or no bytes), the
    most of any cell per model, task and metric; nothing when there are none."""
    counts: dict[tuple[str, str, str], int] = {}
    for c in cells:
        for key, slot in c.get("docs", {}).items():
            label = MetricSpec(*key.rsplit(",", 1)).label if "," in key else key
            k = (c["model"], c["cell"]["task"], label)
            counts[k] = max(counts.get(k, 0), len(slot.get("excluded", [])))
    found = [f"{m} / {t} / {metric}: {n}" for (m, t, metric), n in sorted(counts.items()) if n]
    if not found:
        return []
    return [
        (
            "p",
            "Documents with no words or no bytes (lm-eval logs [0, 0]) have no perplexity "
            "ratio and are left out of it: " + "; ".join(found) + ".",
        )
    ]


def unscorable_blocks(rows: list[dict[str, Any]]) -> list[Block]:
    """The metrics posgen could not score, each with its reason (nothing when none)."""
    if not rows:
        return []
    items = [
        f"{r['model']} / {r['task']} / {r['metric']}: {r['reason']} ({r['cells']} cell(s))"
        for r in rows
    ]
    return [
        ("h", 2, "Metrics not scored"),
        (
            "p",
            "lm-eval reported these metrics, but posgen cannot score them; they have no "
            "degradation, tolerance or gate cell. Their figures are in lm-eval's own "
            "results (raw/).",
        ),
        ("ul", items),
    ]


def not_shown_blocks(cfg: RunConfig, scores: dict[str, Any]) -> list[Block]:
    seeds = cfg.seeds
    items = [
        "Only one perturbation seed per cell: the CIs cover document sampling (and, "
        "because every document draws its own perturbation, perturbation noise per "
        "document), not a second draw of the whole sweep."
        if seeds == 1
        else f"{seeds} perturbation seeds per cell, averaged per document: the CIs "
        "cover document sampling and the draw's variance.",
        f"Only the documents scored (limits {dict(cfg.limits)}); the full tasks may "
        "give other figures.",
        "Per-document values, lm-eval's raw results and samples are in the run folder "
        "(perdoc.parquet, raw/), not in this report.",
    ]
    missing = [m for m in cfg_models(cfg) if m not in scores["fit"]]
    if missing:
        items.append(f"No decomposition fit for {', '.join(missing)}.")
    if sum(not m.random_init for m in cfg.models) < 3:
        items.append(
            "Cross-model correlations need at least 3 models (random-init twins not "
            "counted) and are not estimated."
        )
    return [("h", 2, "What is not shown"), ("ul", items)]
