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
    """One row per model (random-init twins beside their model): fit r, then the
    tolerance [range] per (task, kind, scheme)."""
    rows = tolerance_rows(scores, cfg.tasks)
    columns = list(dict.fromkeys(zip(rows["task"], rows["kind"], rows["scheme"], strict=True)))
    labels = {}
    for r in rows.itertuples(index=False):
        key = (r.task, r.kind, r.scheme)
        labels[key] = f"{r.task} ({_threshold(r)}): {r.kind} {r.scheme}"
    out = []
    for m in twins_beside(list(cfg.models)):
        fit = scores["fit"].get(m.label)
        line = [m.label, f"{fit['r_3axis']:.3f}" if fit else "not run"]
        mine = {(r.task, r.kind, r.scheme): r for r in rows[rows["model"] == m.label].itertuples()}
        line += [tolerance_text(mine[c]) if c in mine else "not run" for c in columns]
        out.append(line)
    return ["model", "fit r (3-axis)", *(labels[c] for c in columns)], out


def tolerance_figure(
    rows, fit: dict[str, float] | None, model: str, swept: dict[str, SweptAxis]
) -> bytes | None:
    """The model's tolerances with their ranges on the swept axes (a panel per axis with
    a measurable tolerance), its fit r beside them (a panel when the fit was run); None
    when there is neither."""
    rows = rows[rows["measurable"].astype(bool)]
    groups = [
        g for g in ("rate", "sigma") if g in swept and (rows["kind"].map(group_of) == g).any()
    ]
    fits = {FIT_FORMS[c]: fit[c] for c in FIT_COLUMNS if fit and np.isfinite(fit.get(c, np.nan))}
    if not groups and not fits:
        return None
    sizes = [int((rows["kind"].map(group_of) == g).sum()) for g in groups]
    widths = [5.0] * len(groups) + ([2.2] if fits else [])
    height = 1.6 + 0.42 * max([*sizes, len(fits)])
    from matplotlib.figure import Figure

    fig = Figure(figsize=(sum(widths) + 1.5, height))
    axes = fig.subplots(1, len(widths), width_ratios=widths, squeeze=False)
    for ax, group in zip(axes[0], groups, strict=False):
        _tolerance_panel(ax, rows[rows["kind"].map(group_of) == group], swept[group])
    if fits:
        _fit_panel(axes[0][-1], fits)
    fig.suptitle(f"Position tolerance [range] and fit quality: {model}", fontsize=11)
    fig.tight_layout()
    return png_bytes(fig)


def _tolerance_panel(ax, rows, swept: SweptAxis) -> None:
    """A row per (task, kind, scheme): the tolerance, its range as a horizontal bar and
    its value written beside it."""
    rows = rows.iloc[::-1]  # the first row on top
    for y, r in enumerate(rows.itertuples(index=False)):
        color, marker = KIND_STYLE.get(r.kind, ("black", "o"))
        err = [[abs(r.tolerance - r.tolerance_lo)], [abs(r.tolerance_hi - r.tolerance)]]
        ax.errorbar([r.tolerance], [y], xerr=err, fmt=marker, color=color, capsize=3)
        if r.tolerance >= r.max_rate:  # never passed: the tolerance may be larger
            ax.plot([r.tolerance], [y], ">", color=color, ms=9, mfc="none", clip_on=False)
        ax.annotate(
            tolerance_text(r), (r.tolerance, y), xytext=(0, 6), textcoords="offset points",
            ha="center", fontsize=7,
        )  # fmt: skip
    labels = [f"{r.task} ({_threshold(r)})\n{r.kind} {r.scheme}" for r in rows.itertuples()]
    ax.set_yticks(range(len(labels)), labels, fontsize=7)
    ax.set_ylim(-0.6, len(labels) - 0.3)
    ax.set_ylabel("task (threshold): perturbation", fontsize=8)
    swept.apply(ax)
    ax.grid(axis="x", color="0.9", lw=0.6)
    ax.set_title("tolerance [range]: " + ("rate" if swept.group == "rate" else "σ"), fontsize=9)


def _fit_panel(ax, fits: dict[str, float]) -> None:
    """The fit's mean per-head r of each form, on [0, 1]."""
    names = list(fits)[::-1]
    values = [fits[n] for n in names]
    ax.plot(values, range(len(names)), "o", color="tab:purple")
    for y, v in enumerate(values):
        ax.annotate(f"{v:.3f}", (v, y), xytext=(0, 6), textcoords="offset points", fontsize=7)
    ax.set_yticks(range(len(names)), names, fontsize=7)
    ax.set_ylim(-0.6, len(names) - 0.3)
    ax.set_xlim(0.0, 1.05)
    ax.set_xlabel("mean per-head r of the\nattention-logit decomposition fit", fontsize=8)
    ax.set_ylabel("form of the fit", fontsize=8)
    ax.set_title("fit quality", fontsize=9)


def tolerance_blocks(cfg: RunConfig, scores: dict[str, Any], swept) -> list[Block]:
    """The section: its reading note, the table (one line per model), a figure per
    model (or one line saying why a model has none)."""
    blocks: list[Block] = [("h", 2, "How position-tolerant is each model"), ("p", READING)]
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
