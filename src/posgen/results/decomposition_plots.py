"""PNG plots of the logit decomposition (matplotlib, Agg backend), written atomically."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


def _figure():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: Path) -> None:
    from posgen.harness.decompose_io import atomic_write

    atomic_write(Path(path), lambda p: fig.savefig(p, format="png", dpi=110, bbox_inches="tight"))
    _figure().close(fig)


def plot_r_heatmap(
    table: pd.DataFrame, path: Path, column: str = "r_3axis", title: str = ""
) -> None:
    """Layer × head heatmap of ``column`` averaged over documents."""
    plt = _figure()
    grid = table.groupby(["layer", "head"])[column].mean().unstack("head")
    fig, ax = plt.subplots(figsize=(1.2 + 0.45 * grid.shape[1], 1.2 + 0.22 * grid.shape[0]))
    im = ax.imshow(grid.to_numpy(), aspect="auto", vmin=0, vmax=1, cmap="viridis", origin="lower")
    ax.set_xlabel("head")
    ax.set_ylabel("layer")
    ax.set_title(title or f"{column} (mean over documents)", fontsize=9)
    fig.colorbar(im, ax=ax, label=column)
    _save(fig, path)


def plot_head_map(actual: np.ndarray, fitted: np.ndarray, path: Path, title: str) -> None:
    """One head's actual logits beside a[i−j] + b[i] + c[j] (NaN = not fitted, blank)."""
    import numpy as np

    plt = _figure()
    fig, axes = plt.subplots(1, 2, figsize=(10, 4.6))
    lo, hi = np.nanpercentile(actual, [1, 99])
    for ax, data, name in (
        (axes[0], actual, "actual W[i, j]"),
        (axes[1], fitted, "fit a[i−j] + b[i] + c[j]"),
    ):
        im = ax.imshow(data, vmin=lo, vmax=hi, cmap="magma", interpolation="nearest")
        ax.set_title(name, fontsize=9)
        ax.set_xlabel("key j")
        ax.set_ylabel("query i")
    fig.colorbar(im, ax=axes, shrink=0.8, label="logit")
    fig.suptitle(title, fontsize=9)
    _save(fig, path)


def plot_lines(
    frame: pd.DataFrame,
    x: str,
    ys: list[str],
    path: Path,
    title: str,
    group: str | None = None,
    logx: bool = False,
) -> None:
    """Lines of ``ys`` against ``x`` (one line per ``group`` value and y column)."""
    plt = _figure()
    fig, axes = plt.subplots(1, len(ys), figsize=(4.2 * len(ys), 3.4), squeeze=False)
    groups = frame.groupby(group, sort=False) if group else [("", frame)]
    for ax, y in zip(axes[0], ys, strict=True):
        for key, g in groups:
            g = g.sort_values(x)
            ax.plot(g[x], g[y], marker="o", ms=3, label=str(key))
        ax.set_xlabel(x)
        ax.set_ylabel(y)
        if logx:
            ax.set_xscale("log")
        if group:
            ax.legend(fontsize=7)
    fig.suptitle(title, fontsize=9)
    _save(fig, path)
