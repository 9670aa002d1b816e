"""PNG plots of the logit decomposition (matplotlib object API), written atomically."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from posgen.atomic import atomic_write
from posgen.results.report.plots import new_figure, r_heatmap

if TYPE_CHECKING:
    import numpy as np
    import pandas as pd


class HeadMap(NamedTuple):
    """One head's captured logits beside its fit ([n, n] float64, NaN = unfitted)."""

    actual: np.ndarray
    fitted: np.ndarray
    title: str


def _save(fig, path: Path) -> None:

    atomic_write(Path(path), lambda p: fig.savefig(p, format="png", dpi=110, bbox_inches="tight"))


def plot_r_heatmap(
    table: pd.DataFrame, path: Path, column: str = "r_3axis", title: str = ""
) -> None:
    """Layer × head heatmap of ``column`` averaged over documents (the report's figure)."""

    _save(r_heatmap(table, column=column, title=title), path)


def plot_head_map(actual: np.ndarray, fitted: np.ndarray, path: Path, title: str) -> None:
    """One head's actual logits beside a[i−j] + b[i] + c[j] (NaN = not fitted, blank)."""
    import numpy as np

    fig, grid = new_figure(1, 2, figsize=(10, 4.6))
    axes = grid[0]
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

    fig, axes = new_figure(1, len(ys), figsize=(4.2 * len(ys), 3.4))
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


def write_plots(
    out: str | Path, table: pd.DataFrame, head_map: HeadMap | None = None
) -> list[Path]:
    """heatmap_r_<variant>.png per (random_init, n) and, given ``head_map`` (see
    :func:`posgen.harness.decomposition.pipeline.median_head_map`), head_map.png: one
    head's logits beside its fit. Returns the paths."""
    out, paths = Path(out), []
    for (rand, n), g in table.groupby(["random_init", "n"]):
        variant = f"{'random_init' if rand else 'trained'}_n{n}"
        paths.append(out / f"heatmap_r_{variant}.png")
        plot_r_heatmap(g, paths[-1], title=f"{g['model'].iloc[0]} {variant}: r_3axis")
    if head_map is not None:
        paths.append(out / "head_map.png")
        plot_head_map(head_map.actual, head_map.fitted, paths[-1], head_map.title)
    return paths
