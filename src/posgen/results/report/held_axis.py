"""A figure's y axis held to its curves, with the intervals that run past it marked.

A wide interval at few documents (a perplexity's upper bound at +800 %) would, if the
axis followed it, flatten every curve drawn on that axis. So the y limits follow the
point estimates (and the lines every curve is read against: 0 and the tolerance
threshold), with a margin that gives the intervals at most half the points' span again
on either side; an interval bound beyond that is drawn up to the axis's edge, where a
marker in the curve's colour (▲ above, ▼ below) stands at its x with the true bound
written beside it.

A relative increase (a perplexity ratio − 1, unit ``relative``) is drawn on the log of
the ratio, log(1 + D), with ticks written as percentages: a curve that runs to +2000 %
at rate 0.5 then leaves the +10 % threshold and the small rates readable, and the
interval, a t interval on log(1 + D), is as wide above the point as below it. Every
other unit is drawn linear.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from posgen.results.report.figure_record import CLIPPED

REACH = 0.5  # how far past the points an interval may take the axis, x their span
PAD = 0.06  # then a margin on either side, x the span held


def held_limits(
    values: Iterable[float], also: Sequence[float] = (), bounds: Iterable[float] = ()
) -> tuple[float, float]:
    """y limits holding every finite value of ``values`` and ``also`` (the points), taken
    toward the interval ``bounds`` by at most ``REACH`` times the points' span (so a
    moderate interval shows whole and a wide one is cut at the edge), then padded."""
    v = np.asarray([*values, *also], dtype=float)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return -1.0, 1.0
    lo, hi = float(v.min()), float(v.max())
    span = hi - lo if hi > lo else max(abs(hi), 1e-3)
    b = np.asarray(list(bounds), dtype=float)
    b = b[np.isfinite(b)]
    if b.size:
        lo = max(min(lo, float(b.min())), lo - REACH * span)
        hi = min(max(hi, float(b.max())), hi + REACH * span)
    pad = PAD * (hi - lo)
    return lo - pad, hi + pad


# tick candidates of a relative increase, the first first: each is kept when it stands at
# least a ninth of the axis from every tick kept before it
RATIO_TICKS = (0.0, 1, 10, 100, 1000, 10000, 0.1, -0.5, -0.9, 0.5, 2, 5, 20, 50, 200, 500)
RATIO_TICKS += (-0.2, 0.2, -0.1, 0.05, 0.02, -0.05)


def _log_ratio(d):
    return np.log1p(np.maximum(np.asarray(d, dtype=float), -1 + 1e-9))


def percent(d: float) -> str:
    """A relative increase as the axis writes it: ``+10%``, ``-50%``, ``0``."""
    return "0" if d == 0 else f"{d:+,.0%}" if abs(d) >= 0.01 else f"{d:+.2%}"


def scale_note(unit: str) -> str:
    """What to add to the y label of a ``unit`` axis about its scale."""
    return "\n(log scale of the ratio)" if unit == "relative" else ""


def hold_y(
    ax: Any, unit: str, values: Iterable[float], also: Sequence[float] = (), bounds=()
) -> None:
    """Give ``ax`` the y scale of ``unit`` (log(1 + D) for ``relative``, else linear) and
    the limits :func:`held_limits` holds, computed on that scale."""
    from matplotlib.ticker import NullLocator

    if unit != "relative":
        ax.set_ylim(*held_limits(values, also, bounds))
        return
    ax.set_yscale("function", functions=(_log_ratio, np.expm1))
    lo, hi = held_limits(_log_ratio(list(values)), _log_ratio(list(also)), _log_ratio(list(bounds)))
    bottom, top = float(np.expm1(lo)), float(np.expm1(hi))
    ax.set_ylim(bottom, top)
    ticks: list[float] = []
    for t in RATIO_TICKS:
        at = float(_log_ratio(t))
        if lo <= at <= hi and all(abs(at - _log_ratio(k)) >= (hi - lo) / 9 for k in ticks):
            ticks.append(t)
    ticks.sort()
    ax.set_yticks(ticks, [percent(t) for t in ticks])
    ax.yaxis.set_minor_locator(NullLocator())


def mark_beyond(
    ax: Any,
    x: Sequence[float],
    lo: Sequence[float],
    hi: Sequence[float],
    color: str,
    slot: int = 0,
    unit: str = "",
) -> int:
    """Mark every interval bound of ``(x, lo, hi)`` past ``ax``'s (already fixed) y limits
    at the edge it passes, its value written beside the marker (as a percentage for a
    ``relative`` unit); ``slot`` stacks the texts of several curves at one x. Returns the
    number of bounds marked."""
    bottom, top = ax.get_ylim()
    marked = 0
    for xi, lo_i, hi_i in zip(x, lo, hi, strict=True):
        for bound, over in ((hi_i, hi_i > top), (lo_i, lo_i < bottom)):
            if not (np.isfinite(bound) and over):
                continue
            up = bound > top
            edge = top if up else bottom
            ax.plot([xi], [edge], "^" if up else "v", color=color, ms=6, clip_on=False, gid=CLIPPED)
            ax.annotate(
                percent(bound) if unit == "relative" else f"{bound:+.3g}",
                (xi, edge),
                xytext=(-5, (-3 - 9 * slot) if up else (3 + 9 * slot)),
                textcoords="offset points",
                ha="right",
                va="top" if up else "bottom",
                fontsize=7,
                color=color,
                gid=CLIPPED,
            )
            marked += 1
    return marked


def legend(ax: Any, **kwargs: Any) -> None:
    """The panel's legend, with an entry for the edge markers when it has any."""
    from matplotlib.lines import Line2D

    handles, labels = ax.get_legend_handles_labels()
    if any(line.get_gid() == CLIPPED for line in ax.lines):
        handles.append(Line2D([], [], marker="^", ls="none", color="0.4"))
        labels.append("interval past the axis (bound written)")
    if handles:
        ax.legend(handles, labels, **kwargs)
