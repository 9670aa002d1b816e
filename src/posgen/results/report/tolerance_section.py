"""The report's first section: how position-tolerant each model is, one line and one
figure per model.

The line: per task (its primary metric) and perturbation, the tolerance with its range
(``tolerance_table``: the largest amount applied whose degradation stays within the
threshold at that amount and every smaller one; the range from the 95% CI's upper and
lower bounds), and the decomposition's fit quality beside it (mean per-head r, 3-axis)
where the fit was run. The figure draws the same tolerances and ranges on the report's
swept axes (:mod:`posgen.results.report.swept_axis`), a panel per swept axis that was
run, and the fit's r of its three forms beside them.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from posgen.results.folder.config import RunConfig
from posgen.results.folder.metrics import MetricSpec
from posgen.results.report.figure_record import png_bytes
from posgen.results.report.plots import KIND_STYLE
from posgen.results.report.render import Block
from posgen.results.report.run_tables import twins_beside
from posgen.results.report.swept_axis import SweptAxis, group_of
from posgen.results.scores.metric_units import primary, threshold_text
from posgen.results.scores.scoring import FIT_COLUMNS

KIND_ORDER = {"text": 0, "position": 1, "feature": 2}
FIT_FORMS = dict(zip(FIT_COLUMNS, ("3-axis", "2-axis", "distance+key"), strict=True))

READING = (
    "One line per model. Tolerance: the largest amount applied (the rate for text and "
    "position swaps, σ for rope_noise) at which the degradation of the task's primary "
    "metric stays within its threshold, at that amount and every smaller one; the range "
    "beside it uses the upper and lower bounds of the degradation's 95% CI. ≥: the "
    "threshold was never passed up to the largest amount applied, so the tolerance may be "
    "larger; 0: passed already at the smallest amount. Fit r: mean per-head r of the "
    "attention-logit decomposition (3-axis: W[i,j] ≈ a[i-j] + b[i] + c[j]), where it was "
    "run. Each model's figure draws the same on the report's rate and σ axes."
)


def tolerance_rows(scores: dict[str, Any], tasks: tuple[str, ...] | list[str]):
    """The rows of the tolerance table on each task's primary metric, in task order
    (``tasks``), then text, position, feature."""
    tol = scores["tolerance"]
    order = {t: i for i, t in enumerate(tasks)}
    keep = []
    for task, specs in scores["metrics"].items():
        spec = primary(specs)
        if spec is not None:
            sel = (tol["task"] == task) & (tol["metric"] == spec.metric)
            keep.append(tol[sel & (tol["filter"] == spec.filter)])
    if not keep:
        return tol.iloc[0:0]
    import pandas as pd

    rows = pd.concat(keep, ignore_index=True)
    rank = rows["task"].map(lambda t: order.get(t, len(order))) * 10
    rank += rows["kind"].map(lambda k: KIND_ORDER.get(k, 3))
    return rows.assign(_rank=rank).sort_values(["_rank", "scheme"], kind="stable")


def amount_text(v: float, top: float) -> str:
    """A tolerance bound; ``≥`` when it is the largest amount applied (never crossed)."""
    return f"≥{v:g}" if v >= top else f"{v:g}"


def tolerance_text(r: Any) -> str:
    """``0.05 [0.02, 0.1]`` of a tolerance row, or why it has none."""
    if not getattr(r, "measurable", True):
        return "not measurable (baseline at or past the threshold)"
    top = r.max_rate
    lo, hi = amount_text(r.tolerance_lo, top), amount_text(r.tolerance_hi, top)
    return f"{amount_text(r.tolerance, top)} [{lo}, {hi}]"


def _threshold(r: Any) -> str:
    """The row's threshold as the report writes it (``+10% PPL``, ``-0.05 acc``)."""
    label = MetricSpec(r.metric, r.filter).label
    return threshold_text(r.unit, r.threshold, label, bool(r.higher_is_better))


def tolerance_table(cfg: RunConfig, scores: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """One row per model (random-init twins beside their model): fit r, then per task
    each perturbation's tolerance [range] (``text swap: 0.05 [0.02, 0.1]; ...``)."""
    rows = tolerance_rows(scores, cfg.tasks)
    tasks = list(dict.fromkeys(rows["task"]))
    perturbations = {
        t: list(dict.fromkeys(zip(g["kind"], g["scheme"], strict=True)))
        for t, g in rows.groupby("task", sort=False)
    }
    out = []
    for m in twins_beside(list(cfg.models)):
        fit = scores["fit"].get(m.label)
        line = [m.label, f"{fit['r_3axis']:.3f}" if fit else "not run"]
        mine = {(r.task, r.kind, r.scheme): r for r in rows[rows["model"] == m.label].itertuples()}
        for t in tasks:
            cells = [
                f"{k} {s}: " + (tolerance_text(mine[(t, k, s)]) if (t, k, s) in mine else "not run")
                for k, s in perturbations[t]
            ]
            line.append("; ".join(cells))
        out.append(line)
    return ["model", "fit r (3-axis)", *tasks], out


def thresholds_text(cfg: RunConfig, scores: dict[str, Any]) -> str:
    """The threshold of each task's primary metric, as one sentence."""
    rows = tolerance_rows(scores, cfg.tasks)
    parts = []
    for r in rows.drop_duplicates("task").itertuples(index=False):
        label = MetricSpec(r.metric, r.filter).label
        if r.unit == "metric":  # relative to each model's own unperturbed figure
            sign = "-" if r.higher_is_better else "+"
            rule = f"{sign}{cfg.scoring.threshold_ppl:.0%} of the model's unperturbed {label}"
        else:
            rule = _threshold(r)
        parts.append(f"{r.task}: {label}, {rule}")
    return "Thresholds (each task's primary metric): " + "; ".join(parts) + "."


def tolerance_figure(
    rows, fit: dict[str, float] | None, model: str, swept: dict[str, SweptAxis]
) -> bytes | None:
    """The model's tolerances with their ranges on the swept axes (a panel per axis with
    a measurable tolerance, a row per task shared between them), its fit r beside them
    (a panel when the fit was run); None when there is neither."""
    from matplotlib.figure import Figure

    rows = rows[rows["measurable"].astype(bool)]
    groups = [
        g for g in ("rate", "sigma") if g in swept and (rows["kind"].map(group_of) == g).any()
    ]
    fits = {FIT_FORMS[c]: fit[c] for c in FIT_COLUMNS if fit and np.isfinite(fit.get(c, np.nan))}
    if not groups and not fits:
        return None
    tasks = list(dict.fromkeys(rows["task"]))
    widths = [4.6 if g == "rate" else 3.2 for g in groups] + ([1.9] if fits else [])
    fig = Figure(figsize=(sum(widths) + 1.6, 1.5 + 0.8 * max(len(tasks), 2)))
    axes = fig.subplots(1, len(widths), width_ratios=widths, squeeze=False)[0]
    for i, group in enumerate(groups):
        if i:
            axes[i].sharey(axes[0])
        _tolerance_panel(axes[i], rows[rows["kind"].map(group_of) == group], tasks, swept[group])
        axes[i].tick_params(labelleft=i == 0)
    if groups:
        first = {r.task: r for r in rows.itertuples(index=False)}
        labels = [f"{t}\n{_threshold(first[t])}" for t in tasks]
        axes[0].set_yticks(range(len(tasks)), labels, fontsize=7)
        axes[0].set_ylim(len(tasks) - 0.5, -0.75)  # the first task on top
        axes[0].set_ylabel("task (primary metric's threshold)", fontsize=8)
    if fits:
        _fit_panel(axes[-1], fits)
    fig.suptitle(f"Position tolerance [range] and fit quality: {model}", fontsize=11)
    fig.tight_layout()
    return png_bytes(fig)


def _tolerance_panel(ax, rows, tasks: list[str], swept: SweptAxis) -> None:
    """Per task (a row), each (kind, scheme): its tolerance, its range as a horizontal
    bar, and both written above it."""
    swept.apply(ax)
    for y, task in enumerate(tasks):
        mine = list(rows[rows["task"] == task].itertuples(index=False))
        offsets = np.linspace(-0.22, 0.22, len(mine)) if len(mine) > 1 else [0.0]
        for dy, r in zip(offsets, mine, strict=True):
            color, marker = KIND_STYLE.get(r.kind, ("black", "o"))
            err = [[abs(r.tolerance - r.tolerance_lo)], [abs(r.tolerance_hi - r.tolerance)]]
            ax.errorbar([r.tolerance], [y + dy], xerr=err, fmt=marker, color=color, capsize=3)
            if r.tolerance >= r.max_rate:  # never passed: the tolerance may be larger
                ax.plot([r.tolerance], [y + dy], ">", color=color, ms=9, mfc="none")
            text = f"{r.kind} {r.scheme}: {tolerance_text(r)}"
            left = _axes_x(ax, r.tolerance) < 0.55  # the text runs away from the nearer edge
            ax.annotate(
                text, (r.tolerance, y + dy), xytext=(-3 if not left else 3, 4),
                textcoords="offset points", ha="left" if left else "right", fontsize=6.5,
                color=color,
            )  # fmt: skip
    ax.grid(axis="x", color="0.9", lw=0.6)
    ax.set_title("tolerance [range]: " + ("rate" if swept.group == "rate" else "σ"), fontsize=9)


def _axes_x(ax, x: float) -> float:
    """Where data ``x`` falls across ``ax`` (0: left edge, 1: right edge)."""
    return float(ax.transAxes.inverted().transform(ax.transData.transform((x, 0.0)))[0])


def _fit_panel(ax, fits: dict[str, float]) -> None:
    """The fit's mean per-head r of each form, on [0, 1]."""
    names = list(fits)
    values = [fits[n] for n in names]
    ax.plot(values, range(len(names)), "o", color="tab:purple")
    for y, v in enumerate(values):
        ax.annotate(f"{v:.3f}", (v, y), xytext=(0, 6), textcoords="offset points", fontsize=7)
    ax.set_yticks(range(len(names)), names, fontsize=7)
    ax.set_ylim(len(names) - 0.5, -0.7)  # the 3-axis form on top
    ax.set_xlim(0.0, 1.05)
    ax.set_xticks([0.0, 0.5, 1.0], ["0", "0.5", "1"], fontsize=8)
    ax.set_xlabel("mean per-head r of the\nattention-logit decomposition fit", fontsize=8)
    ax.set_ylabel("form of the fit", fontsize=8)
    ax.set_title("fit quality", fontsize=9)


def tolerance_blocks(cfg: RunConfig, scores: dict[str, Any], swept) -> list[Block]:
    """The section: its reading note, the table (one line per model), a figure per
    model (or one line saying why a model has none)."""
    blocks: list[Block] = [("h", 2, "How position-tolerant is each model"), ("p", READING)]
    blocks.append(("p", thresholds_text(cfg, scores)))
    blocks.append(("table", *tolerance_table(cfg, scores)))
    rows = tolerance_rows(scores, cfg.tasks)
    for m in twins_beside(list(cfg.models)):
        png = tolerance_figure(
            rows[rows["model"] == m.label], scores["fit"].get(m.label), m.label, swept
        )
        if png is None:
            blocks.append(("p", f"{m.label}: no figure: no measurable tolerance and no fit."))
        else:
            blocks.append(("img", f"Position tolerance and fit quality: {m.label}", png))
    return blocks
