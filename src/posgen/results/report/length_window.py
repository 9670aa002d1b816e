"""The report's view of the in-distribution window: the excess curve per scheme with its
intervals, and the effective length it gives beside the old one
(:mod:`posgen.results.scores.length_window`)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

WINDOW_NOTE = (
    "Excess over the in-distribution window: per bucket past C, the scheme's NLL minus the "
    "NLL of the same tokens each scored with C − S … C − 1 tokens before it at the model's "
    "own positions 0 … C − 1 (one pass per document, shared by every scheme); content is "
    "equal, so harder text past C cancels. Mean over documents with a t interval (95%, none "
    "with one document). Effective length vs the window: the start of the first bucket at "
    "or after C whose mean excess exceeds ln(1 + threshold) (≥: never within the run); the "
    "old figure compares each bucket with the mean NLL over [C/2, C) of the same run. The "
    "window is the model as trained, so a scheme that costs inside C as well (scale:F "
    "without fine-tuning) reads C when that cost exceeds the threshold."
)


def _f(x: Any, fmt: str = "+.3f") -> str:
    return "–" if x is None or not math.isfinite(float(x)) else format(float(x), fmt)


def has_window(scores: Mapping[str, Any]) -> bool:
    """Whether the scores hold the window pass (runs made before it do not)."""
    return bool(scores.get("effective_window"))


def window_cells(scores: Mapping[str, Any], scheme: str) -> list[str]:
    """Effective-table cells for ``scheme``: mean excess past C, effective length vs the
    window, its interval (dashes for a run without the window pass)."""
    eff = (scores.get("effective_window") or {}).get(scheme)
    if eff is None:
        return ["–", "–", "–"]
    rows = [r for r in scores.get("excess", []) if r["scheme"] == scheme]
    mean = float(np.nanmean([r["excess"] for r in rows])) if rows else math.nan
    length = f"{'≥ ' if eff['censored'] else ''}{eff['effective_length']}"
    return [_f(mean), length, f"[{eff['ci_low']:.0f}, {eff['ci_high']:.0f}]"]


WINDOW_HEADER = ["excess past C vs window", "effective length vs window", "95% interval"]


def excess_table(scores: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows: bucket start, then per scheme ``excess [low, high]`` (nats/token)."""
    rows_in = scores.get("excess") or []
    schemes = list(dict.fromkeys(r["scheme"] for r in rows_in))
    table = {(r["scheme"], r["start"]): r for r in rows_in}
    rows = []
    for start in sorted({r["start"] for r in rows_in}):
        cells = [str(start)]
        for s in schemes:
            r = table.get((s, start))
            bounds = (
                ""
                if r is None or _f(r["ci_low"]) == "–"
                else f" [{_f(r['ci_low'])}, {_f(r['ci_high'])}]"
            )
            cells.append("–" if r is None else _f(r["excess"]) + bounds)
        rows.append(cells)
    return ["bucket start", *schemes], rows


def excess_axes(ax: Any, scores: Mapping[str, Any]) -> None:
    """Plot the excess curves with their t-interval bands and the threshold on ``ax``."""
    cfg = scores["config"]
    for scheme in scores["effective_window"]:
        rows = [r for r in scores["excess"] if r["scheme"] == scheme]
        x = np.array([(r["start"] + r["stop"]) / 2 for r in rows])
        y = np.array([r["excess"] for r in rows], dtype=float)
        lo = np.array([np.nan if r["ci_low"] is None else r["ci_low"] for r in rows], dtype=float)
        hi = np.array([np.nan if r["ci_high"] is None else r["ci_high"] for r in rows], dtype=float)
        (line,) = ax.plot(x, y, marker=".", label=scheme)
        if np.isfinite(lo).any():
            ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.15, linewidth=0)
    ax.axhline(math.log1p(cfg["threshold"]), color="0.3", linestyle="--", label="threshold")
    ax.axhline(0.0, color="0.6", linewidth=0.8)
    ax.set_xlabel("token position")
    ax.set_ylabel("NLL − NLL(window) (nats / token)")
    ax.set_title("excess over the in-distribution window")
    ax.legend(fontsize=8)
