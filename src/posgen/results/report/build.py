"""Rebuild a run's tables, scores and report from its cells.

Writes into the run folder: ``results.parquet``, ``perdoc.parquet``,
``degradation.parquet``, ``tolerance.parquet``, ``scores.json``, ``report.md`` (PNG
plots beside it under ``plots/``) and a self-contained ``report.html`` (the same
plots embedded as base64). Scores are recomputed from the cells each time, with the
seeded bootstrap, so a regenerated report is identical.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posgen.atomic import atomic_write_bytes, atomic_write_text
from posgen.results.folder.config import RunConfig
from posgen.results.folder.run_store import RunStore
from posgen.results.report import plots
from posgen.results.report.depth import depth_blocks
from posgen.results.report.depth_account import account_blocks
from posgen.results.report.examples import examples_section
from posgen.results.report.length import run_blocks as length_run_blocks
from posgen.results.report.realised_plots import common_axis_blocks
from posgen.results.report.render import Block, render_html, render_markdown
from posgen.results.report.run_notes import (
    REALISED_TEXT,
    UNITS_TEXT,
    cfg_models,
    excluded_blocks,
    header_blocks,
    not_shown_blocks,
    unscorable_blocks,
)
from posgen.results.report.run_tables import (
    correlation_blocks,
    detail_table,
    models_table,
    summary_table,
)
from posgen.results.report.swept_axis import axes_of
from posgen.results.report.tolerance_section import tolerance_blocks
from posgen.results.report.worst_case import worst_case_blocks
from posgen.results.scores.metric_units import primary, shown
from posgen.results.scores.run import json_records, load_scores
from posgen.results.tables.length import length_tables


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


# --- content ------------------------------------------------------------------------------
def build_blocks(store, scores: dict[str, Any]) -> list[Block]:
    """Every block of a run's report, in reading order."""
    cfg = store.run_config
    swept = axes_of(scores["degradation"])  # one rate and one σ scale for every figure
    blocks: list[Block] = [("h", 1, f"posgen report: {store.root.name}")]
    blocks += header_blocks(cfg)
    blocks += tolerance_blocks(cfg, scores, swept)
    blocks += summary_blocks(scores)
    blocks += models_blocks(cfg, scores)
    blocks += figure_blocks(cfg, scores, swept)
    blocks += [("h", 2, "Degradation at each rate")]
    blocks += [("p", REALISED_TEXT), ("p", UNITS_TEXT)]
    blocks.append(("table", *detail_table(scores)))
    blocks += worst_case_blocks(cfg, scores)  # posgen run --seeds K > 1
    blocks += length_run_blocks(store.root)  # posgen run --length: RUN/length/<model>/
    titles = cfg.depth.titles() if cfg.depth is not None else {}  # --depth-lengths
    depth = depth_blocks(scores["perdoc"], titles=titles)[0]  # depth cells (text | position)
    blocks += depth + (account_blocks(store.root) if depth else [])  # RUN/depth_account/
    blocks += examples_section(cfg_models(cfg), scores["cells"])
    blocks += not_shown_blocks(cfg, scores)
    return blocks


def summary_blocks(scores: dict[str, Any]) -> list[Block]:
    """Every plotted metric's tolerance: how to read it, its table, the documents and
    metrics left out."""
    blocks: list[Block] = [("h", 2, "Tolerance per metric and perturbation")]
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
    return blocks


def models_blocks(cfg: RunConfig, scores: dict[str, Any]) -> list[Block]:
    """The models side by side (fit quality and tolerance), then the relation of the two
    across models."""
    blocks: list[Block] = [("h", 2, "Models side by side: fit quality and tolerance")]
    probe = cfg.decompose
    windows = f" on {probe.docs} probe windows of {probe.tokens} tokens" if probe.docs else ""
    blocks += [
        (
            "p",
            f"Fit quality: mean per-head r of the attention-logit decomposition{windows} "
            "(3-axis: W[i,j] ≈ a[i-j] + b[i] + c[j]; 2-axis and distance+key forms "
            "beside). Tolerance and AUC on the first task's primary metric.",
        )
    ]
    blocks.append(("table", *models_table(cfg, scores)))
    blocks += [("h", 2, "Fit quality vs tolerance across models")]
    blocks += correlation_blocks(scores)
    png = plots.fit_vs_tolerance(scores["summary"])
    if png is None:
        pairs = [plots.finite_pairs(pm, "auc") for pm in scores["summary"].values()]
        n = max(map(len, pairs), default=0)
        blocks.append(
            (
                "p",
                f"No figure of degradation against fit quality: it needs at least two "
                f"models with both a decomposition fit and a tolerance on a task; this run "
                f"has {n}.",
            )
        )
    else:
        blocks.append(("img", "Degradation vs fit quality", png))
    return blocks


def figure_blocks(cfg: RunConfig, scores: dict[str, Any], swept) -> list[Block]:
    """The figures: degradation curves (on the report's swept axes ``swept``) and the
    common realised axis per model, fit quality per head."""
    scored = set(zip(scores["degradation"]["task"], scores["degradation"]["metric"], strict=True))
    panels = [
        (task, spec)
        for task, specs in sorted(scores["metrics"].items())
        for spec in shown(specs)
        if (task, spec.metric) in scored
    ]
    blocks: list[Block] = [("h", 2, "Figures")]
    for m in cfg_models(cfg) if panels else []:
        png = plots.degradation_curves(scores["degradation"], scores["tolerance"], m, panels, swept)
        if png is not None:
            blocks.append(("img", f"Degradation curves: {m}", png))
    firsts = {task: spec for task, spec in panels if spec == primary(scores["metrics"][task])}
    blocks += common_axis_blocks(cfg_models(cfg), scores, firsts)
    for m, d in scores["decompositions"].items():
        blocks.append(("img", f"Fit quality per head: {m}", plots.fit_heatmap(d, m)))
    return blocks
