"""What each figure of the run report draws, written into its PNG and read back.

Every run-report figure carries, in a PNG text chunk ``posgen:figure``, a record of its
panels (one per axes, colorbars included): the title, the axis labels (a panel sharing
its y axis with another carries that one's label), the x scale (with
its symlog parameters) and x tick labels, the y scale and limits, and what the panel
draws:

- ``points``: finite data points of lines and markers (reference lines such as the zero
  line or the threshold, drawn across the axes, are not data);
- ``scatter``: finite points of scatter plots (isolated markers, no line between them);
- ``intervals``: interval segments (error bars);
- ``bands``: filled bands (a curve's interval);
- ``images``: images and meshes (heatmaps);
- ``clipped``: interval bounds beyond the axis, marked at its edge, and
  ``clipped_bounds`` the bounds written beside those marks.

:func:`problems` says which panels show nothing; the browser check of the report
(``benchmarks/check_report_browser.py``) and the tests read the record back with
:func:`read_record`. The record needs no model and no pyplot: it is read off the
``matplotlib.figure.Figure`` just before it is saved.
"""

from __future__ import annotations

import io
import json
import struct
import zlib
from typing import Any

import numpy as np

KEY = "posgen:figure"
CLIPPED = "posgen-clipped"  # gid of the markers of interval bounds beyond the axis


def _finite_points(xy: Any) -> int:
    a = np.asarray(xy, dtype=float).reshape(-1, 2) if np.size(xy) else np.empty((0, 2))
    return int(np.isfinite(a).all(axis=1).sum())


def _is_data(artist: Any, ax: Any) -> bool:
    """Drawn in data coordinates (a curve), not across the axes (axhline, axvline, whose
    blended transform may equal transData as a mapping: identity is what tells)."""
    return artist.get_transform() is ax.transData


def axes_record(ax: Any) -> dict[str, Any]:
    """One panel's record (module doc)."""
    from matplotlib.collections import LineCollection, PathCollection, PolyCollection

    counts = dict.fromkeys(("points", "scatter", "intervals", "bands", "images", "clipped"), 0)
    for line in ax.lines:
        if line.get_gid() == CLIPPED:
            counts["clipped"] += _finite_points(line.get_xydata())
        elif _is_data(line, ax) and line.get_visible():
            counts["points"] += _finite_points(line.get_xydata())
    for c in ax.collections:
        if isinstance(c, PathCollection):
            counts["scatter"] += _finite_points(c.get_offsets())
        elif isinstance(c, LineCollection):
            counts["intervals"] += len(c.get_segments())
        elif isinstance(c, PolyCollection):
            counts["bands"] += len(c.get_paths())
        else:  # QuadMesh and other meshes
            counts["images"] += 1
    counts["images"] += len(ax.images)
    scale = ax.xaxis.get_scale()
    transform = ax.xaxis.get_transform()
    rec: dict[str, Any] = {
        "title": ax.get_title(),
        "xlabel": ax.get_xlabel(),
        "ylabel": _ylabel(ax),
        "colorbar": hasattr(ax, "_colorbar"),
        "xscale": scale,
        "xticks": [t.get_text() for t in ax.get_xticklabels()],
        "xtick_values": [float(v) for v in ax.get_xticks()],
        "xlim": [float(v) for v in ax.get_xlim()],
        "ylim": [float(v) for v in ax.get_ylim()],
        "yscale": ax.yaxis.get_scale(),
        "clipped_bounds": [t.get_text() for t in ax.texts if t.get_gid() == CLIPPED],
        **counts,
    }
    if scale == "symlog":
        rec["linthresh"] = float(transform.linthresh)
        rec["linscale"] = float(transform.linscale)
    return rec


def _ylabel(ax: Any) -> str:
    """The panel's y label, or that of the panel it shares its y axis with (drawn once,
    beside the first)."""
    siblings = ax.get_shared_y_axes().get_siblings(ax)
    return ax.get_ylabel() or next((a.get_ylabel() for a in siblings if a.get_ylabel()), "")


def figure_record(fig: Any) -> dict[str, Any]:
    """The figure's record: its suptitle and one record per visible axes."""
    fig.draw_without_rendering()  # tick labels are known once drawn
    title = fig._suptitle.get_text() if fig._suptitle is not None else ""
    axes = [axes_record(ax) for ax in fig.axes if ax.get_visible() and ax.axison]
    return {"title": title, "axes": axes}


def png_bytes(fig: Any) -> bytes:
    """The figure as PNG bytes (110 dpi, tight bounding box), its record inside."""
    record = json.dumps(figure_record(fig), ensure_ascii=True, sort_keys=True)
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=110, bbox_inches="tight", metadata={KEY: record})
    return buf.getvalue()


def read_record(png: bytes) -> dict[str, Any] | None:
    """The ``posgen:figure`` record of PNG bytes, or None when it has none (a PNG that
    is not posgen's, or one written before posgen recorded its figures)."""
    if png[:8] != b"\x89PNG\r\n\x1a\n":
        raise ValueError("not a PNG")
    at = 8
    while at + 8 <= len(png):
        (size,), kind = struct.unpack(">I", png[at : at + 4]), png[at + 4 : at + 8]
        data = png[at + 8 : at + 8 + size]
        at += 12 + size
        if kind in (b"tEXt", b"zTXt", b"iTXt"):
            key, _, rest = data.partition(b"\0")
            if key.decode("latin-1") != KEY:
                continue
            if kind == b"zTXt":
                rest = zlib.decompress(rest[1:])
            elif kind == b"iTXt":
                flag, rest = rest[0], rest[2:]
                rest = rest.split(b"\0", 2)[2]
                rest = zlib.decompress(rest) if flag else rest
            return json.loads(rest.decode("utf-8"))
    return None


def problems(record: dict[str, Any] | None) -> list[str]:
    """What makes a figure show nothing, one line per panel at fault: no record at all, a
    panel that draws no data, a panel whose only data is one scatter point (nothing to
    compare it with), a panel without its axis labels."""
    if record is None:
        return ["no record of what it draws (a figure from before posgen recorded them)"]
    out = []
    for i, ax in enumerate(record["axes"]):
        name = f"panel {i + 1} ({ax['title'] or 'untitled'})"
        drawn = ax["points"] + ax["scatter"] + ax["intervals"] + ax["bands"] + ax["images"]
        if drawn == 0:
            out.append(f"{name} draws nothing")
        elif ax["scatter"] == 1 and drawn - ax["intervals"] == 1:
            out.append(f"{name} draws a single point: nothing to compare it with")
        if not ax["colorbar"] and not (ax["xlabel"] and ax["ylabel"]):
            out.append(f"{name} has no {'x' if not ax['xlabel'] else 'y'} axis label")
    return out
