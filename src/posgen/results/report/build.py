"""Rebuild a run's tables, scores and report from its cells.

Writes into the run folder: ``results.parquet``, ``perdoc.parquet``,
``degradation.parquet``, ``tolerance.parquet``, ``scores.json``, ``report.md`` (PNG
plots beside it under ``plots/``) and a self-contained ``report.html`` (the same
plots embedded as base64). Scores are recomputed from the cells each time, with the
seeded bootstrap, so a regenerated report is identical.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from posgen.atomic import atomic_write_bytes, atomic_write_text
from posgen.results.folder.config import ModelEntry, RunConfig
from posgen.results.folder.metrics import MetricSpec
from posgen.results.report import plots
from posgen.results.report.examples import examples_section
from posgen.results.report.length import run_blocks as length_run_blocks
from posgen.results.report.realised_plots import common_axis_blocks
from posgen.results.report.render import Block, render_html, render_markdown
from posgen.results.report.worst_case import worst_case_blocks
from posgen.results.scores.association import RULE
from posgen.results.scores.metric_units import primary, shown, threshold_text
from posgen.results.scores.run import json_records, load_scores
from posgen.results.scores.scoring import FIT_COLUMNS
from posgen.results.tables.realised import realised_text
from posgen.results.tables.tidy import length_tables


def regenerate(run_dir: Path | str) -> dict[str, Path]:
    """Rebuild every derived file of a run; returns their paths."""

    store, scores = load_scores(run_dir)
    paths = {
        name: store.write_table(f"{name}.parquet", scores[name])
        for name in ("results", "perdoc", "degradation", "tolerance")
    }

    for name, table in length_tables(store.root).items():  # read by the report and compare
        paths[name] = store.write_table(f"{name}.parquet", table)
    paths["scores"] = store.write_json("scores.json", scores_json(store, scores))
    blocks = build_blocks(store, scores)
    images = {}
    for i, b in enumerate(x for x in blocks if x[0] == "img"):
        name = f"plots/figure{i + 1}.png"
        atomic_write_bytes(store.root / name, b[2])
        images[id(b)] = name
    paths["md"] = store.root / "report.md"
    atomic_write_text(paths["md"], render_markdown(blocks, images))
    paths["html"] = store.root / "report.html"
    atomic_write_text(paths["html"], render_html(blocks, title=f"posgen report: {store.root.name}"))
    return paths


def not_scored_notes(run_dir: Path | str) -> list[str]:
    """``<model> / <task> / <metric> not scored: <reason>`` for every metric of a reported
    run posgen could not score (read from its scores.json), for the commands to print."""
    from posgen.results.folder.run_store import RunStore

    rows = RunStore.open(run_dir).read_json("scores.json").get("unscorable", [])
    return [f"{r['model']} / {r['task']} / {r['metric']} not scored: {r['reason']}" for r in rows]


def scores_json(store, scores: dict[str, Any]) -> dict[str, Any]:

    return {
        "config_hash": store.config_hash,
        "scoring": store.run_config.scoring.to_dict(),
        "interval_method": {
            "perplexity": store.run_config.scoring.interval,
            "bits_per_byte": store.run_config.scoring.interval,
            "accuracy": "agresti-min",
            "mean": "paired-t",
            "corpus": "bootstrap-percentile",
        },
        "metrics": {
            task: [{**s.to_dict(), "rule": s.rule, "reason": s.reason} for s in specs]
            for task, specs in scores["metrics"].items()
        },
        "unscorable": scores["unscorable"],
        "degradation": json_records(scores["degradation"]),
        "tolerance": json_records(scores["tolerance"]),
        "fit": scores["fit"],
        "cross_model": scores["cross_model"],
    }


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


# --- content ------------------------------------------------------------------------------
def build_blocks(store, scores: dict[str, Any]) -> list[Block]:

    cfg = store.run_config
    blocks: list[Block] = [("h", 1, f"posgen report: {store.root.name}")]
    blocks += header_blocks(cfg)
    blocks += [("h", 2, "Summary")]
    blocks += [
        (
            "p",
            "Tolerance = the largest swept rate (σ for feature schemes) whose "
            "degradation stays at or under the threshold, at that rate and every smaller "
            "one; the range beside it uses the upper and lower 95% CI bounds. Crossing = "
            "where the interpolated curve first exceeds the threshold. AUC = mean "
            "degradation over the swept range.",
        )
    ]
    blocks.append(("table", *summary_table(scores)))
    blocks += excluded_blocks(scores["cells"])
    blocks += unscorable_blocks(scores["unscorable"])
    blocks += [("h", 2, "Models side by side: fit quality and tolerance")]
    blocks += [
        (
            "p",
            "Fit quality: mean per-head r of the attention-logit decomposition "
            "(3-axis: W[i,j] ≈ a[i-j] + b[i] + c[j]; 2-axis and distance+key forms "
            "beside). Tolerance and AUC on the first task's primary metric.",
        )
    ]
    blocks.append(("table", *models_table(cfg, scores)))
    blocks += [("h", 2, "Fit quality vs tolerance across models")]
    blocks += correlation_blocks(scores)
    scored = set(zip(scores["degradation"]["task"], scores["degradation"]["metric"], strict=True))
    panels = [
        (task, spec)
        for task, specs in sorted(scores["metrics"].items())
        for spec in shown(specs)
        if (task, spec.metric) in scored
    ]
    blocks += [("h", 2, "Figures")]
    for m in cfg_models(cfg) if panels else []:
        blocks.append(
            (
                "img",
                f"Degradation curves: {m}",
                plots.degradation_curves(scores["degradation"], scores["tolerance"], m, panels),
            )
        )
    firsts = {task: spec for task, spec in panels if spec == primary(scores["metrics"][task])}
    blocks += common_axis_blocks(cfg_models(cfg), scores, firsts)
    for m, d in scores["decompositions"].items():
        blocks.append(("img", f"Fit quality per head: {m}", plots.fit_heatmap(d, m)))
    if scores["summary"]:
        blocks.append(
            ("img", "Degradation vs fit quality", plots.fit_vs_tolerance(scores["summary"]))
        )
    blocks += [("h", 2, "Degradation at each rate")]
    blocks += [("p", REALISED_TEXT), ("p", UNITS_TEXT)]
    blocks.append(("table", *detail_table(scores)))
    blocks += worst_case_blocks(cfg, scores)  # posgen run --seeds K > 1
    blocks += length_run_blocks(store.root)  # posgen run --length: RUN/length/<model>/
    blocks += examples_section(cfg_models(cfg), scores["cells"])
    blocks += not_shown_blocks(cfg, scores)
    return blocks


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


def summary_table(scores: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Per model and task, each plotted metric (the task's primary first): its
    unperturbed figure and, per perturbation, the tolerance on its threshold."""
    res, tol = scores["results"], scores["tolerance"]
    base = res[res["kind"] == "none"].set_index(["model", "task", "metric", "filter"])["value"]
    rows = []
    for (model, task), g in tol.groupby(["model", "task"], sort=False):
        for spec in shown(scores["metrics"].get(task, ())):
            mine = g[(g["metric"] == spec.metric) & (g["filter"] == spec.filter)]
            for r in mine.itertuples(index=False):
                rows.append(
                    [
                        model,
                        task,
                        spec.label,
                        _fmt(base.get((model, task, spec.metric, spec.filter))),
                        f"{r.kind} {r.scheme}",
                        threshold_text(r.unit, r.threshold, spec.label, bool(r.higher_is_better)),
                        f"{r.tolerance:g} [{r.tolerance_lo:g}, {r.tolerance_hi:g}]"
                        if getattr(r, "measurable", True)
                        else "not measurable: baseline at or beyond the threshold",
                        "none on grid" if _missing(r.crossing) else f"{r.crossing:.3g}",
                        _fmt(r.auc),
                    ]
                )
    return (
        [
            "model",
            "task",
            "metric",
            "unperturbed",
            "perturbation",
            "threshold",
            "tolerance [range]",
            "crossing",
            "AUC",
        ],
        rows,
    )


def _missing(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _fmt(x: Any, digits: int = 4) -> str:
    return "n/a" if _missing(x) else f"{x:.{digits}g}"


def models_table(cfg: RunConfig, scores: dict[str, Any]) -> tuple[list[str], list]:
    """One row per model: fit quality and, on the first task, tolerance and AUC per kind."""
    summary = scores["summary"]
    task = (cfg.tasks or ("",))[0]
    kinds = [k for k in ("text", "position", "feature") if f"{task}|{k}" in summary]
    rows = []
    for m in twins_beside(list(cfg.models)):
        f = scores["fit"].get(m.label, {})
        row = [
            m.label,
            "yes" if m.random_init else "no",
            *(_fmt(f.get(c), 3) if f else "not run" for c in FIT_COLUMNS),
        ]
        for k in kinds:
            v = summary[f"{task}|{k}"].get(m.label, {})
            row += [_fmt(v.get("tolerance")), _band(v, "tolerance_interp"), _fmt(v.get("auc"), 3)]
        rows.append(row)
    header = ["model", "random init", "mean r (3-axis)", "2-axis", "distance+key"]
    for k in kinds:
        header += [f"{k} tolerance", f"{k} crossing [95% band]", f"{k} AUC"]
    return header, rows


def _band(v: dict[str, Any], key: str) -> str:
    if _missing(v.get(key)):
        return "n/a"
    lo, hi = v.get(f"{key}_lo"), v.get(f"{key}_hi")
    band = "" if _missing(lo) or _missing(hi) else f" [{lo:.3g}, {hi:.3g}]"
    return f"{v[key]:.3g}{band}"


def twins_beside(models: list[ModelEntry]) -> list[ModelEntry]:
    """Models in config order, each random-init twin right after the model it copies."""
    labels = {m.label for m in models}
    base = [m for m in models if not (m.random_init and _twin_of(m) in labels)]
    out = []
    for m in base:
        out.append(m)
        out += [t for t in models if t.random_init and _twin_of(t) == m.label]
    return out


def _twin_of(m: ModelEntry) -> str:
    return m.label.removesuffix("+random-init")


def correlation_blocks(scores: dict[str, Any]) -> list[Block]:

    corr = scores["cross_model"]
    if not any(c["estimable"] for c in corr):
        n = max((c["n"] for c in corr), default=0)
        return [
            (
                "p",
                f"Not estimable: {n} model(s) with both a fit and a tolerance (random-init "
                "twins not counted); a correlation across models needs at least 3, so no "
                "number is given.",
            )
        ]
    rows = []
    for c in corr:
        cells = [c.get("reason", ""), "", "", ""]
        if c["estimable"]:
            cells = [f"{c[k]['r']:.2f} (p = {c[k]['p']:.3g})" for k in ("spearman", "pearson")]
            spread = c["spearman"].get("doc_resampled", {}).get("band", [None, None])
            cells.append("n/a" if spread[0] is None else f"[{spread[0]:.2f}, {spread[1]:.2f}]")
            cells.append(
                "descriptive only"
                if c["descriptive_only"]
                else ("relation" if c["claim"] else "no relation shown")
            )
        twins = f" (+{len(c['twins'])} twin)" if c.get("twins") else ""
        rows.append([c["task"], c["kind"], f"r_3axis vs {c['y']}", f"{c['n']}{twins}", *cells])
    head = ["task", "kind", "variables", "n models", "Spearman ρ (exact p)", "Pearson r (exact p)"]
    head += ["ρ over document resamples", "reading"]
    return [("p", f"Rule: {RULE} p is two-sided."), ("table", head, rows)]


UNIT_TEXT = {"relative": "relative", "bits": "bits/byte", "fraction": "[0, 1]", "metric": "own"}


def detail_table(scores: dict[str, Any]) -> tuple[list[str], list[list[str]]]:

    res = scores["results"]
    realised = res.drop_duplicates(["model", "task", "kind", "scheme", "rate"]).set_index(
        ["model", "task", "kind", "scheme", "rate"]
    )
    rows = []
    for r in scores["degradation"].itertuples(index=False):
        key = (r.model, r.task, r.kind, r.scheme, r.rate)
        rows.append(
            [
                r.model,
                r.task,
                MetricSpec(r.metric, r.filter).label,
                f"{r.kind} {r.scheme}",
                f"{r.rate:g}",
                realised_text(realised.loc[key]) if key in realised.index else "not recorded",
                f"{r.degradation:+.4f} ({UNIT_TEXT.get(r.unit, r.unit)})",
                f"[{r.ci_lo:+.4f}, {r.ci_hi:+.4f}] {r.interval}",
                str(r.n),
                _consistency(r),
            ]
        )
    head = ["model", "task", "metric", "perturbation", "rate/σ", "realised", "degradation"]
    return ([*head, "95% CI", "docs", "choice unchanged [95% CI]"], rows)


def _consistency(r: Any) -> str:
    c = getattr(r, "consistency", math.nan)
    if _missing(c):
        return ""
    return f"{c:.2f} [{r.consistency_lo:.2f}, {r.consistency_hi:.2f}]"


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
