"""The report's figures, rendered to PNG bytes with matplotlib's Agg backend."""

from __future__ import annotations

import io
from collections.abc import Mapping
from typing import Any

import numpy as np

KIND_STYLE = {
    "text": ("tab:blue", "o"),
    "position": ("tab:red", "s"),
    "feature": ("tab:green", "^"),
}


def _png(fig) -> bytes:
    import matplotlib.pyplot as plt

    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight")
    plt.close(fig)
    return buf.getvalue()


def _pyplot():
    import matplotlib

    matplotlib.use("Agg", force=True)
    import matplotlib.pyplot as plt

    return plt


def degradation_curves(
    degr, model: str, metrics: Mapping[str, str], thresholds: Mapping[str, float]
) -> bytes:
    """One row per task (its primary metric), two panels: rate (text vs position schemes)
    and σ (feature schemes). Lines: degradation; bands: the bootstrap CI; the dotted line
    is the tolerance threshold."""
    plt = _pyplot()
    tasks = sorted(metrics)
    fig, axes = plt.subplots(len(tasks), 2, figsize=(10, 3.2 * len(tasks)), squeeze=False)
    sub = degr[degr["model"] == model]
    for row, task in enumerate(tasks):
        metric = metrics[task]
        g = sub[(sub["task"] == task) & (sub["metric"] == metric)]
        for col, kinds in enumerate((("text", "position"), ("feature",))):
            ax = axes[row][col]
            for (kind, scheme), h in g[g["kind"].isin(kinds)].groupby(["kind", "scheme"]):
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
            ax.axhline(0.0, color="grey", lw=0.6)
            ax.axhline(thresholds[metric], color="black", lw=0.8, ls=":", label="threshold")
            ax.set_xlabel("rate (fraction moved)" if col == 0 else "σ (positions)")
            ax.set_ylabel(_ylabel(metric))
            ax.set_title(f"{task}: {'text vs position' if col == 0 else 'feature'}", fontsize=10)
            if len(ax.lines) > 2:
                ax.legend(fontsize=8)
            else:
                ax.text(0.5, 0.5, "not run", ha="center", va="center", transform=ax.transAxes)
    fig.suptitle(f"Degradation with 95% bootstrap CI: {model}", fontsize=11)
    fig.tight_layout()
    return _png(fig)


def _ylabel(metric: str) -> str:
    return f"{metric}: relative increase" if "perplexity" in metric else f"{metric}: drop"


def fit_heatmap(decomp, model: str, column: str = "r_3axis") -> bytes:
    """Layer × head heatmap of ``column`` averaged over documents, drawn by the
    decomposition's own plot function (posgen.results.decomposition_plots)."""
    import tempfile
    from pathlib import Path

    from posgen.results.decomposition_plots import plot_r_heatmap

    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "heatmap.png"
        plot_r_heatmap(
            decomp,
            path,
            column=column,
            title=f"Fit quality per head ({column}, mean over documents): {model}",
        )
        return path.read_bytes()


def fit_vs_tolerance(summary: Mapping[str, Mapping[str, Any]], y: str = "auc") -> bytes:
    """Scatter across models: fit quality (mean r_3axis) against the degradation AUC, one
    panel per task and kind."""
    plt = _pyplot()
    from matplotlib.ticker import MaxNLocator

    groups = sorted(summary)
    ncols = min(3, len(groups)) or 1
    nrows = max(1, -(-len(groups) // ncols))
    fig, axes = plt.subplots(nrows, ncols, figsize=(4.2 * ncols, 3.4 * nrows), squeeze=False)
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
