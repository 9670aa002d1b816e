"""The common realised axis: text, position and feature perturbations side by side.

A nominal rate means different things for different kinds (a rate of words, a rate of
token positions, a σ of Gaussian jitter). What all three change is where an item sits
relative to the others, so the panel puts every cell at its realised mean |Δposition|
per item (posgen.results.tables.realised: ``realised_mean_displacement``): the mean
|new index − old index| over a document's words for text swaps, over a row's tokens for
position swaps, and the mean |p'[t] − t| of the jittered positions for ``rope_noise``
(expectation σ·√(2/π)). Rotary attention sees a token through its position difference
to the others, so a kind that degrades alike at the same mean shift acts alike.
Text indices are words, not tokens (a word is one or more tokens), so the text curve
sits a little left of where a token count would put it. ``qk_noise`` moves no position
and has no place on this axis, nor has a model-side cell read from lm-eval's output
(``posgen ingest``: the output holds no plan, so no realised amount); the panel names
each not placed and why. A task with no curve placed has no panel.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np

from posgen.results.folder.metrics import MetricSpec
from posgen.results.report.figure_record import png_bytes
from posgen.results.report.held_axis import hold_y, legend, mark_beyond, scale_note
from posgen.results.report.plots import KIND_STYLE, new_figure
from posgen.results.scores.metric_units import axis_text

KEYS = ["model", "task", "metric", "filter", "kind", "scheme", "rate"]


def realised_frame(results, degr):
    """``degr`` rows joined with their cell's realised amounts from ``results``."""
    cols = [*KEYS, "realised_mean_displacement", "realised_fraction_moved", "realised_unit"]
    cols += ["realised_items", "realised_items_moved"]
    return degr.merge(results[cols], on=KEYS, how="left")


def common_axis(results, degr, model: str, metrics: Mapping[str, Any]) -> bytes | None:
    """One panel per task (``metrics``: its primary MetricSpec) with at least one curve
    that moved positions: degradation with its 95% CI against the realised mean
    |Δposition| per item, a line per (kind, scheme), the y axis held to the points (bounds
    past it marked). None when no task has such a curve."""
    joined = realised_frame(results, degr)
    joined = joined[joined["model"] == model]
    panels = {}
    for task, spec in sorted(metrics.items()):
        g = joined[
            (joined["task"] == task)
            & (joined["metric"] == spec.metric)
            & (joined["filter"] == spec.filter)
        ]
        if np.isfinite(g["realised_mean_displacement"].to_numpy(dtype=float)).any():
            panels[task] = (spec, g)
    if not panels:
        return None
    fig, axes = new_figure(1, len(panels), figsize=(5.2 * len(panels), 3.8))
    for ax, (task, (spec, g)) in zip(axes[0], panels.items(), strict=True):
        _dress_panel(ax, task, spec, g, _realised_curves(ax, g))
    fig.suptitle(f"Degradation on a common realised axis (95% CI): {model}", fontsize=11)
    fig.tight_layout()
    return png_bytes(fig)


def _realised_curves(ax, g) -> dict[str, list[str]]:
    """A line per (kind, scheme) of one panel's rows ``g``, from (0, 0): degradation with
    its 95% CI against the realised mean |Δposition|, the y axis held to the points and
    0. Returns the (kind, scheme) names ``placed``, and those not placed: ``unmoved``
    (measured, no position moved: qk noise) and ``unrecorded`` (no realised amount
    recorded: a model-side cell read from lm-eval's output, which holds no plan)."""
    out: dict[str, list[str]] = {"placed": [], "unmoved": [], "unrecorded": []}
    placed = []
    for (kind, scheme), h in g.groupby(["kind", "scheme"]):
        h = h.sort_values("rate")
        x = h["realised_mean_displacement"].to_numpy(dtype=float)
        name = f"{kind} {scheme}"
        if not np.isfinite(x).any():
            recorded = h["realised_items"].fillna(0).to_numpy().any()
            out["unmoved" if recorded else "unrecorded"].append(name)
        else:
            placed.append((kind, name, h, x))
    points = [v for *_, h, _ in placed for v in h["degradation"]]
    bounds = [v for *_, h, _ in placed for c in ("ci_lo", "ci_hi") for v in h[c]]
    unit = str(g["unit"].iloc[0]) if len(g) else "metric"
    hold_y(ax, unit, points, (0.0,), bounds)
    for slot, (kind, name, h, x) in enumerate(placed):
        color, marker = KIND_STYLE.get(kind, ("black", "o"))
        y = np.concatenate([[0.0], h["degradation"].to_numpy(dtype=float)])
        lo = np.concatenate([[0.0], h["ci_lo"].to_numpy(dtype=float)])
        hi = np.concatenate([[0.0], h["ci_hi"].to_numpy(dtype=float)])
        x = np.concatenate([[0.0], x])
        bottom, top = ax.get_ylim()
        err = np.abs(np.vstack([y - np.maximum(lo, bottom), np.minimum(hi, top) - y]))
        ax.errorbar(x, y, yerr=err, marker=marker, color=color, capsize=2, label=name)
        mark_beyond(ax, x, lo, hi, color, slot, unit)
        out["placed"].append(name)
    return out


NOT_PLACED = {
    "unmoved": "no position displacement, not placed: ",
    "unrecorded": "no realised amount recorded (lm-eval output), not placed: ",
}


def _dress_panel(ax, task: str, spec: MetricSpec, g, curves: dict[str, list[str]]) -> None:
    """One panel's axes, labels, title, legend and notes (what was not placed and why)."""
    ax.axhline(0.0, color="grey", lw=0.6)
    ax.set_xscale("symlog", linthresh=0.1)
    ax.set_xmargin(0.08)
    ax.autoscale_view(scaley=False)
    ax.set_xlabel("realised mean |Δposition| per item\n(text: words; position, feature: tokens)")
    unit = str(g["unit"].iloc[0]) if len(g) else "metric"
    ax.set_ylabel(axis_text(unit, spec.label, bool(spec.higher_is_better)) + scale_note(unit))
    ax.set_title(f"{task}", fontsize=10)
    notes = [text + ", ".join(curves[k]) for k, text in NOT_PLACED.items() if curves[k]]
    if notes:
        ax.text(0.02, 0.97, "\n".join(notes), transform=ax.transAxes, fontsize=7, va="top")
    legend(ax, fontsize=8, loc="upper left", bbox_to_anchor=(0.0, 0.9))


def common_axis_blocks(models: list[str], scores: Mapping[str, Any], metrics) -> list[tuple]:
    """The report's common-axis figures, one per model, with their reading note."""
    if not metrics or "realised_mean_displacement" not in scores["results"]:
        return []
    out: list[tuple] = [
        (
            "p",
            "Common realised axis: every perturbed cell at its realised mean |Δposition| "
            "per item (text: words of the document; position and feature: tokens of the "
            "model row). If feature-level and position-index perturbations act alike, "
            "their points fall on one curve.",
        )
    ]
    for m in models:
        png = common_axis(scores["results"], scores["degradation"], m, metrics)
        if png is None:
            out.append(("p", f"{m}: no common-axis figure: {_why_none(scores['results'], m)}."))
        else:
            out.append(("img", f"Degradation vs realised mean |Δposition|: {m}", png))
    return out


def _why_none(results, model: str) -> str:
    """Why ``model`` has no common-axis figure: its perturbed cells moved no position, or
    (a model-side cell read from lm-eval's output) recorded no realised amount."""
    rows = results[(results["model"] == model) & (results["kind"] != "none")]
    if len(rows) and not rows["realised_items"].fillna(0).to_numpy().any():
        return "no realised amount recorded (lm-eval output holds no plan)"
    return "no cell of it moved a position"
