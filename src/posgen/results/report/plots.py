"""The report's figures, rendered to PNG with matplotlib's object API.

Figures are ``matplotlib.figure.Figure`` objects drawn on their own Agg canvas: posgen never
touches pyplot's global state or switches the user's backend.
"""

from __future__ import annotations

import io
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

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


def png_bytes(fig) -> bytes:
    """The figure as PNG bytes (110 dpi, tight bounding box)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


def _png(fig) -> bytes:
    return png_bytes(fig)


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


def degradation_curves(degr, tol, model: str, panels: Sequence[tuple[str, Any]]) -> bytes:
    """One row per (task, metric) panel (``panels``: ``(task, MetricSpec)``), two columns:
    rate (text vs position schemes) and σ (feature schemes). Lines: degradation in the
    metric's unit; bands: the 95% CI; the dotted line is the tolerance threshold."""
    fig, axes = new_figure(len(panels), 2, figsize=(10, 3.2 * len(panels)))
    sub = degr[degr["model"] == model]
    thr = tol[tol["model"] == model]
    for row, (task, spec) in enumerate(panels):
        sel = (
            (sub["task"] == task) & (sub["metric"] == spec.metric) & (sub["filter"] == spec.filter)
        )
        g = sub[sel]
        t = thr[
            (thr["task"] == task) & (thr["metric"] == spec.metric) & (thr["filter"] == spec.filter)
        ]
        for col, kinds in enumerate((("text", "position"), ("feature",))):
            ax = axes[row][col]
            curves = g[g["kind"].isin(kinds)].groupby(["kind", "scheme"])
            _draw_curves(ax, curves)
            ax.axhline(0.0, color="grey", lw=0.6)
            if len(t) and np.isfinite(t["threshold"].iloc[0]):
                ax.axhline(t["threshold"].iloc[0], color="black", lw=0.8, ls=":", label="threshold")
            ax.set_xlabel("rate (fraction moved)" if col == 0 else "σ (positions)")
            ax.set_ylabel(_ylabel(g, spec))
            ax.set_title(
                f"{task} / {spec.label}: {'text vs position' if col == 0 else 'feature'}",
                fontsize=10,
            )
            if len(curves):
                ax.legend(fontsize=8)
            else:
                ax.text(0.5, 0.5, "not run", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle(f"Degradation with 95% CI: {model}", fontsize=11)
    fig.tight_layout()
    return _png(fig)


def _draw_curves(ax, curves) -> None:
    """Each (kind, scheme) group of ``curves``: its degradation against the rate, from
    (0, 0), and its 95% CI as a band."""
    for (kind, scheme), h in curves:
        h = h.sort_values("rate")
        x = np.concatenate([[0.0], h["rate"]])
        color, marker = KIND_STYLE[kind]
        ax.plot(
            x,
            np.concatenate([[0.0], h["degradation"]]),
            marker=marker,
            color=color,
            label=f"{kind} {scheme}",
        )
        ax.fill_between(
            x,
            np.concatenate([[0.0], h["ci_lo"]]),
            np.concatenate([[0.0], h["ci_hi"]]),
            color=color,
            alpha=0.2,
        )


def _ylabel(g, spec) -> str:
    unit = str(g["unit"].iloc[0]) if len(g) else "metric"
    return axis_text(unit, spec.label, bool(spec.higher_is_better))


def fit_heatmap(decomp, model: str, column: str = "r_3axis") -> bytes:
    """Layer × head heatmap of ``column`` averaged over documents (:func:`r_heatmap`)."""
    title = f"Fit quality per head ({column}, mean over documents): {model}"
    if "logit_part" in decomp.columns:  # ALiBi: the full logits (bias included), as fitted
        decomp = decomp[decomp["logit_part"] == "full"]
        family = ", ".join(sorted(set(decomp["position_family"])))
        title = f"{title} ({family} positions, full logits)"
    return _png(r_heatmap(decomp, column=column, title=title))


def fit_vs_tolerance(summary: Mapping[str, Mapping[str, Any]], y: str = "auc") -> bytes:
    """Scatter across models: fit quality (mean r_3axis) against the degradation AUC, one
    panel per task and kind."""
    from matplotlib.ticker import MaxNLocator

    groups = sorted(summary)
    ncols = min(3, len(groups)) or 1
    nrows = max(1, -(-len(groups) // ncols))
    fig, axes = new_figure(nrows, ncols, figsize=(4.2 * ncols, 3.4 * nrows))
    for ax, group in zip(axes.ravel(), groups, strict=False):
        task, kind = group.split("|")
        color, marker = KIND_STYLE.get(kind, ("black", "o"))
        for model, v in sorted(summary[group].items()):
            x, yy = v.get("r_3axis", np.nan), v.get(y, np.nan)
            if np.isfinite(x) and np.isfinite(yy):
                ax.scatter([x], [yy], color=color, marker=marker)
                ax.annotate(model, (x, yy), fontsize=7, xytext=(3, 3), textcoords="offset points")
        ax.margins(x=0.35, y=0.2)  # room for the model labels
        ax.xaxis.set_major_locator(MaxNLocator(4))
        ax.set_xlabel("fit quality: mean r (3-axis)")
        ax.set_ylabel("mean degradation (AUC)" if y == "auc" else y)
        ax.set_title(f"{task} / {kind}", fontsize=10)
    for ax in axes.ravel()[len(groups) :]:
        ax.axis("off")
    fig.suptitle("Degradation vs fit quality across models", fontsize=11)
    fig.tight_layout()
    return _png(fig)
