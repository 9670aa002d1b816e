"""The report's figures, rendered to PNG with matplotlib's object API.

Figures are ``matplotlib.figure.Figure`` objects drawn on their own Agg canvas: posgen never
touches pyplot's global state or switches the user's backend.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from posgen.results.report.figure_record import png_bytes
from posgen.results.report.held_axis import held_limits, hold_y, legend, mark_beyond, scale_note
from posgen.results.report.swept_axis import SweptAxis, group_of
from posgen.results.scores.metric_units import axis_text

KIND_STYLE = {
    "text": ("tab:blue", "o"),
    "position": ("tab:red", "s"),
    "feature": ("tab:green", "^"),
}


def new_figure(nrows: int = 1, ncols: int = 1, figsize: tuple[float, float] = (6, 4)):
    """``(fig, axes[nrows][ncols])``: a standalone figure (no pyplot, no global backend)."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize)
    return fig, fig.subplots(nrows, ncols, squeeze=False)


def r_heatmap(table, column: str = "r_3axis", title: str = ""):
    """Layer × head heatmap figure of ``column`` averaged over documents (rows of a
    decomposition table: layer, head, ``column``)."""
    grid = table.groupby(["layer", "head"])[column].mean().unstack("head")
    fig, axes = new_figure(figsize=(1.2 + 0.45 * grid.shape[1], 1.2 + 0.22 * grid.shape[0]))
    ax = axes[0][0]
    im = ax.imshow(grid.to_numpy(), aspect="auto", vmin=0, vmax=1, cmap="viridis", origin="lower")
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title or f"{column} (mean over documents)", fontsize=9)
    fig.colorbar(im, ax=ax, label=column)
    return fig


def degradation_curves(
    degr, tol, model: str, panels: Sequence[tuple[str, Any]], swept: Mapping[str, SweptAxis]
) -> bytes | None:
    """One row per (task, metric) panel (``panels``: ``(task, MetricSpec)``) that the
    model has curves for, one column per swept axis that was run (``swept``: rate for text
    and position schemes, σ for feature schemes, one scale for the whole report). Lines:
    degradation in the metric's unit; bands: its 95% CI, held to the curves (bounds past
    the axis marked); dotted: the tolerance threshold. None when nothing was scored."""
    sub = degr[degr["model"] == model]
    groups = [gr for gr in ("rate", "sigma") if gr in swept]
    cells = {
        (row, gr): _in_group(_rows(sub, task, spec), gr)
        for row, (task, spec) in enumerate(panels)
        for gr in groups
    }
    keep = [i for i in range(len(panels)) if any(len(cells[(i, gr)]) for gr in groups)]
    groups = [gr for gr in groups if any(len(cells[(i, gr)]) for i in keep)]
    if not keep:
        return None
    fig, axes = new_figure(len(keep), len(groups), figsize=(5.4 * len(groups), 3.4 * len(keep)))
    thr = tol[tol["model"] == model]
    absent = []
    for r, i in enumerate(keep):
        task, spec = panels[i]
        t = _rows(thr, task, spec)
        for c, gr in enumerate(groups):
            ax, g = axes[r][c], cells[(i, gr)]
            if not len(g):  # this kind was not run for this task: no panel
                ax.set_visible(False)
                absent.append(f"{task} / {spec.label}: {gr} not run")
                continue
            threshold = t["threshold"].iloc[0] if len(t) else math.nan
            _curve_panel(ax, g, threshold, swept[gr])
            ax.set_ylabel(_ylabel(g, spec))
            kinds = " vs ".join(dict.fromkeys(g["kind"]))
            ax.set_title(f"{task} / {spec.label}: {kinds}", fontsize=10)
    fig.suptitle(f"Degradation with 95% CI: {model}", fontsize=11)
    if absent:
        fig.text(0.5, 0.0, "; ".join(absent), ha="center", va="top", fontsize=8)
    fig.tight_layout()
    return png_bytes(fig)


def _rows(table, task: str, spec: Any):
    sel = (table["task"] == task) & (table["metric"] == spec.metric)
    return table[sel & (table["filter"] == spec.filter)]


def _in_group(table, group: str):
    """The rows of ``table`` whose kind is swept on ``group`` (rate or σ)."""
    return table[table["kind"].map(group_of) == group]


def _curve_panel(ax, g, threshold: float, swept: SweptAxis) -> None:
    """One panel: a line and band per (kind, scheme) of ``g`` from (0, 0), the y axis
    held to the points, 0 and the threshold, the interval bounds past it marked."""
    curves = list(g.groupby(["kind", "scheme"]))
    also = [0.0] + ([threshold] if np.isfinite(threshold) else [])
    unit = str(g["unit"].iloc[0])
    hold_y(ax, unit, g["degradation"], also, [*g["ci_lo"], *g["ci_hi"]])
    ax.axhline(0.0, color="grey", lw=0.6)
    if np.isfinite(threshold):
        ax.axhline(threshold, color="black", lw=0.8, ls=":", label="threshold")
    for slot, ((kind, scheme), h) in enumerate(curves):
        h = h.sort_values("rate")
        x = np.concatenate([[0.0], h["rate"]])
        color, marker = KIND_STYLE.get(kind, ("black", "o"))
        y = np.concatenate([[0.0], h["degradation"]])
        ax.plot(x, y, marker=marker, color=color, label=f"{kind} {scheme}")
        lo, hi = np.concatenate([[0.0], h["ci_lo"]]), np.concatenate([[0.0], h["ci_hi"]])
        ax.fill_between(x, lo, hi, color=color, alpha=0.2)
        mark_beyond(ax, x, lo, hi, color, slot, unit)
    swept.apply(ax)
    legend(ax, fontsize=7)


def _ylabel(g, spec) -> str:
    unit = str(g["unit"].iloc[0]) if len(g) else "metric"
    return axis_text(unit, spec.label, bool(spec.higher_is_better)) + scale_note(unit)


def fit_heatmap(decomp, model: str, column: str = "r_3axis") -> bytes:
    """Layer × head heatmap of ``column`` averaged over documents (:func:`r_heatmap`)."""
    title = f"Fit quality per head ({column}, mean over documents): {model}"
    if "logit_part" in decomp.columns:  # ALiBi: the full logits (bias included), as fitted
        decomp = decomp[decomp["logit_part"] == "full"]
        family = ", ".join(sorted(set(decomp["position_family"])))
        title = f"{title} ({family} positions, full logits)"
    return png_bytes(r_heatmap(decomp, column=column, title=title))


def fit_vs_tolerance(summary: Mapping[str, Mapping[str, Any]], y: str = "auc") -> bytes | None:
    """Scatter across models: fit quality (mean r_3axis) against the degradation AUC, with
    its band over document resamples where the scores have one, one panel per task and
    kind that at least two models have both for (random-init twins included: the figure
    compares, it does not test). None when no task and kind has two."""
    from matplotlib.ticker import MaxNLocator

    groups = {g: finite_pairs(per_model, y) for g, per_model in sorted(summary.items())}
    groups = {g: pts for g, pts in groups.items() if len(pts) >= 2}
    if not groups:
        return None
    ncols = min(3, len(groups))
    nrows = -(-len(groups) // ncols)
    fig, axes = new_figure(nrows, ncols, figsize=(4.2 * ncols, 3.4 * nrows))
    for ax, (group, pts) in zip(axes.ravel(), groups.items(), strict=False):
        task, kind = group.split("|")
        color, marker = KIND_STYLE.get(kind, ("black", "o"))
        xs, ys = [p[1] for p in pts], [p[2] for p in pts]
        ax.set_ylim(*held_limits(ys, (0.0,), [p[k] for p in pts for k in (3, 4)]))
        ax.scatter(xs, ys, color=color, marker=marker, zorder=3)
        lo, hi = [p[3] for p in pts], [p[4] for p in pts]
        ax.errorbar(xs, ys, yerr=_yerr(ys, lo, hi), fmt="none", ecolor=color, capsize=2)
        mark_beyond(ax, xs, lo, hi, color)
        for model, xv, yv, *_ in pts:
            ax.annotate(model, (xv, yv), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.set_xmargin(0.35)  # room for the model labels
        ax.autoscale_view(scaley=False)
        ax.xaxis.set_major_locator(MaxNLocator(4))
        ax.set_xlabel("fit quality: mean r (3-axis)")
        ax.set_ylabel("mean degradation over the swept range (AUC)" if y == "auc" else y)
        ax.set_title(f"{task} / {kind}", fontsize=10)
    for ax in axes.ravel()[len(groups) :]:
        ax.set_visible(False)
    fig.suptitle("Degradation vs fit quality across models (band: document resamples)", fontsize=11)
    fig.tight_layout()
    return png_bytes(fig)


def finite_pairs(per_model: Mapping[str, Mapping[str, Any]], y: str) -> list[tuple]:
    """``(model, r_3axis, y, y_lo, y_hi)`` of every model with both finite (bounds NaN
    where the scores have no band)."""
    out = []
    for model, v in sorted(per_model.items()):
        x, yy = float(v.get("r_3axis", math.nan)), float(v.get(y, math.nan))
        if np.isfinite(x) and np.isfinite(yy):
            lo, hi = (v.get(f"{y}_{end}") for end in ("lo", "hi"))
            out.append(
                (model, x, yy, math.nan if lo is None else lo, math.nan if hi is None else hi)
            )
    return out


def _yerr(y: Sequence[float], lo: Sequence[float], hi: Sequence[float]) -> np.ndarray:
    """Error bar lengths below and above ``y`` (0 where a bound is unknown)."""
    y, lo, hi = (np.asarray(a, dtype=float) for a in (y, lo, hi))
    return np.nan_to_num(np.abs(np.vstack([y - lo, hi - y])), nan=0.0)
