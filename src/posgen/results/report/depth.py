"""The evidence-depth section of a run report: per model, one figure with a panel per
task, the text and position forms side by side, and the statement of where the curve
comes from (:mod:`posgen.results.scores.depth`, :mod:`posgen.results.scores.depth_forms`).

Each panel draws, per form, ``m(D) - (m(0) + m(1)) / 2`` (the metric against its mean at
the two ends, per document, then averaged) with its paired 95 % interval, so the point
at D = 0.5 is the gap and the intervals are the ones the statement reads; the ends'
level is in the legend. x: the depth applied, 0 (first passage) to 1 (last before the
question), ticks at the depths run.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from posgen.results.report.figure_record import png_bytes
from posgen.results.report.plots import new_figure
from posgen.results.report.render import Block
from posgen.results.scores.depth import depth_documents, depth_scores
from posgen.results.scores.depth_forms import compare_forms

STYLE = {"text": ("tab:blue", "o", -0.008), "position": ("tab:red", "s", 0.008)}
NO_CELLS = "No evidence-depth section: the run has no depth cells (posgen run --kinds depth)."
UNITS = {True: "", False: " (nats per unit)"}


def _iv(r: Mapping[str, Any] | None) -> str:
    if r is None:
        return "n/a (needs depths 0, 0.5, 1)"
    return f"{r['value']:+.3g} [{r['ci_lo']:+.3g}, {r['ci_hi']:+.3g}]"


def depth_figure(
    curves: list[dict],
    gaps: list[dict],
    model: str,
    metrics: Mapping[str, str],
    titles: Mapping[str, str] | None = None,
) -> bytes | None:
    """One panel per task (``metrics``: task -> the metric drawn) of ``model``: each form's
    curve against the ends' mean with its paired interval, the gaps written in the panel.
    ``titles``: a task's name in its panel (a length variant's length; default the task).
    PNG bytes, or None when the model has no depth curve."""
    fig = draw(curves, gaps, model, metrics, titles or {})
    return None if fig is None else png_bytes(fig)


def draw(
    curves: list[dict],
    gaps: list[dict],
    model: str,
    metrics: Mapping[str, str],
    titles: Mapping[str, str] | None = None,
):
    """:func:`depth_figure`'s matplotlib Figure (None when there is nothing to draw)."""
    tasks = [t for t in sorted(metrics) if _rows(curves, model, t, metrics[t])]
    if not tasks:
        return None
    fig, axes = new_figure(1, len(tasks), figsize=(5.2 * len(tasks), 3.8))
    for ax, task in zip(axes[0], tasks, strict=True):
        metric = metrics[task]
        depths = sorted({r["depth"] for r in _rows(curves, model, task, metric)})
        written = []
        for form, (color, marker, dx) in STYLE.items():
            rows = sorted(_rows(curves, model, task, metric, form), key=lambda r: r["depth"])
            if not rows:
                continue
            x = np.array([r["depth"] for r in rows]) + dx
            y = np.array([r["diff"] for r in rows])
            err = [y - [r["diff_lo"] for r in rows], [r["diff_hi"] for r in rows] - y]
            ends = [r["value"] for r in rows if r["depth"] in (0.0, 1.0)]
            level = f", ends' mean {np.mean(ends):.3g}" if len(ends) == 2 else ""
            ax.errorbar(x, y, yerr=err, color=color, marker=marker, ms=4, lw=1, capsize=0,
                        label=f"{form} form{level}")  # fmt: skip
            g = next((g for g in gaps if _is(g, model, task, metric, form)), None)
            written.append(f"gap, {form}: {_iv(g)}")
        ax.axhline(0, color="grey", lw=0.5)
        ax.set_xticks(depths, [f"{d:g}" for d in depths])
        ax.set_xlim(-0.06, 1.06)
        ax.set_xlabel("evidence depth D applied\n(0: first passage, 1: last before the question)")
        binary = all(r["binary"] for r in _rows(curves, model, task, metric))
        ax.set_ylabel(f"{metric}{UNITS[binary]} minus its mean\nat D = 0 and 1 (paired 95 % CI)")
        ax.set_title(f"{(titles or {}).get(task, task)}: {metric}", fontsize=9)
        ax.text(0.02, 0.02, "\n".join(written), transform=ax.transAxes, fontsize=7, va="bottom")
        ax.legend(fontsize=7, loc="upper right", frameon=False)
    fig.suptitle(f"Evidence depth: {model}", fontsize=10)
    fig.tight_layout()
    return fig


def _is(r: Mapping, model: str, task: str, metric: str, form: str | None = None) -> bool:
    return (r["model"], r["task"], r["metric"]) == (model, task, metric) and (
        form is None or r["form"] == form
    )


def _rows(curves: list[dict], model: str, task: str, metric: str, form: str | None = None):
    return [r for r in curves if _is(r, model, task, metric, form) and math.isfinite(r["diff"])]


def first_metrics(docs) -> dict[str, str]:
    """Each task's metric to draw: the first its documents carry (lm-eval's order)."""
    return {t: str(sub["metric"].iloc[0]) for t, sub in docs.groupby("task", sort=True)}


def depth_blocks(
    perdoc, metrics: Mapping[str, str] | None = None, titles: Mapping[str, str] | None = None
) -> tuple[list[Block], str]:
    """The report's evidence-depth blocks from a ``perdoc.parquet`` table, and a line
    saying what was drawn, or ``([], why)`` when there is nothing to draw (no depth
    cells; no depth run in a form beside 0 and 1). ``metrics``: task -> metric drawn
    (default :func:`first_metrics`); ``titles``: task -> its name in the figure and
    sentences (``--depth-lengths``: the variant's length; default the task)."""
    titles = dict(titles or {})
    docs = depth_documents(perdoc)
    if docs.empty:
        return [], NO_CELLS
    metrics = dict(metrics or first_metrics(docs))
    scores = depth_scores(docs)
    blocks: list[Block] = [("h", 2, "Evidence depth (lost in the middle)")]
    blocks.append(("p", INTRO))
    drawn = 0
    for model in sorted(docs["model"].unique()):
        png = depth_figure(scores["curves"], scores["gaps"], model, metrics, titles)
        if png is not None:
            blocks.append(("img", f"Evidence depth: {model}", png))
            drawn += 1
        for task, metric in sorted(metrics.items()):
            out = compare_forms(docs, model, task, metric)
            if out is not None:
                name = f"{task}, {titles[task]}" if task in titles else task
                blocks.append(("p", f"{model} / {name} / {metric}: {out['sentence']}"))
    if not drawn:
        return [], "No evidence-depth figure: no depth cell set holds depths 0 and 1."
    return blocks, f"Evidence depth: {drawn} figure(s)."


INTRO = (
    "Each panel: per form, the metric at each depth minus its mean at depths 0 and 1 "
    "(per document, then averaged), with paired 95 % intervals (the same documents at "
    "every depth and in both forms). The point at D = 0.5 is the middle-versus-ends gap, "
    "gap = m(0.5) − (m(0) + m(1)) / 2 in the metric's own direction: lost in the middle is "
    "a gap below 0 for accuracy, above 0 for an NLL. Text form: the evidence moved in the "
    "text (position code and reading order); position form: only its position ids moved. "
    "The statement under each figure follows the rule of docs/depth.md."
)
