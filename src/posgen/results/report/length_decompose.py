"""The ``posgen length --decompose`` part of the length report: per scheme, a table of
drift beside the fit's r before and past C per layer, the rank correlation over layers,
and one figure with a panel per scheme."""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from typing import Any

import numpy as np

DECOMPOSITION_NOTE = (
    "Attention drift beside the decomposition W[i, j] ≈ a[i−j] + b[i] + c[j] of each "
    "head's logits (ALiBi: its full logits, bias included), fitted on the same ids under "
    "the same forward: per layer, r on the query rows before C and past C and their drop, "
    "and the rms of a[d] past C about its in-context trend (logit units); means over heads "
    "and documents. ρ: Spearman's rank "
    "correlation over layers between drift and the r drop, with the within-model test of "
    "posgen layers (layers are not independent: mirror-ring shift p of the levels and of "
    "the layer-to-layer changes; a relation counts when both are ≤ .05)."
)


def _f(x: Any, fmt: str = ".3f") -> str:
    return "–" if x is None or not math.isfinite(x) else format(x, fmt)


def scheme_table(scores: Mapping[str, Any], scheme: str) -> tuple[list[str], list[list[str]]]:
    """Header and rows for one scheme: layer, drift, r before C, r past C, drop, a rms past."""
    header = ["layer", "drift", "r before C", "r past C", "r drop", "a trend rms past"]
    rows = [
        [
            str(r["layer"]),
            _f(r["drift"]),
            _f(r["r_3axis_before_context"]),
            _f(r["r_3axis_past_context"]),
            _f(r["r_drop"], "+.3f"),
            _f(r["a_trend_rms_past"]),
        ]
        for r in scores["decomposition"]["layers"]
        if r["scheme"] == scheme
    ]
    return header, rows


def _rho(scores: Mapping[str, Any], scheme: str) -> tuple[float | None, int]:
    found = scores["decomposition"]["rank_correlation"][scheme]
    rho = found["rho"]
    return (rho if rho is not None and math.isfinite(rho) else None), int(found["n_layers"])


def correlation_line(scores: Mapping[str, Any], scheme: str) -> str:
    rho, n = _rho(scores, scheme)
    if rho is None:
        return f"ρ(drift, r drop) over layers: – ({n} layer(s) with both figures, needs ≥ 3)"
    found = scores["decomposition"]["rank_correlation"][scheme]
    p, p_changes = found.get("p"), found.get("p_changes")
    if p is None or p_changes is None or not (math.isfinite(p) and math.isfinite(p_changes)):
        return f"ρ(drift, r drop) over {n} layers: {rho:+.2f}"
    verdict = "both ≤ .05" if max(p, p_changes) <= 0.05 else "not both ≤ .05"
    return (
        f"ρ(drift, r drop) over {n} layers: {rho:+.2f} (mirror-shift p = {p:.3g}, "
        f"changes p = {p_changes:.3g}: {verdict})"
    )


def schemes(scores: Mapping[str, Any]) -> list[str]:
    return list(dict.fromkeys(r["scheme"] for r in scores["decomposition"]["layers"]))


def scheme_tables(scores: Mapping[str, Any]) -> list[tuple[str, list[str], list[list[str]]]]:
    """Per scheme: a caption (the scheme and its ρ), the table's header and rows; none
    without ``scores["decomposition"]``."""
    if not scores.get("decomposition"):
        return []
    return [
        (f"`{scheme}`: {correlation_line(scores, scheme)}", *scheme_table(scores, scheme))
        for scheme in schemes(scores)
    ]


def _limits(values: np.ndarray) -> tuple[float, float] | None:
    """Shared axis limits over every panel (finite values, 5 % padding)."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return None
    lo, hi = float(finite.min()), float(finite.max())
    pad = 0.05 * (hi - lo) if hi > lo else max(abs(hi), 1e-3) * 0.05
    return lo - pad, hi + pad


def decomposition_figure(scores: Mapping[str, Any]) -> Any:
    """A matplotlib ``Figure``, one panel per scheme: per layer, drift (left axis) and r
    before / past C (right axis). Every panel has the same drift and r scales, so schemes
    compare by height."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    names = schemes(scores)
    all_rows = scores["decomposition"]["layers"]
    drift_lim = _limits(_column("drift", all_rows))
    r_lim = _limits(
        np.concatenate(
            [_column("r_3axis_past_context", all_rows), _column("r_3axis_before_context", all_rows)]
        )
    )
    fig = Figure(figsize=(4.2 * len(names), 4.1))
    handles: list[Any] = []
    labels: list[str] = []
    for k, scheme in enumerate(names):
        rows = [r for r in all_rows if r["scheme"] == scheme]
        ax = fig.add_subplot(1, len(names), k + 1)
        right = _plot_layers(ax, rows)
        if drift_lim is not None:
            ax.set_ylim(*drift_lim)
        if r_lim is not None:
            right.set_ylim(*r_lim)
        rho, _ = _rho(scores, scheme)
        ax.set_title(f"{scheme}  (ρ = {'–' if rho is None else format(rho, '+.2f')})", fontsize=9)
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        if k == 0:
            left = ax.get_legend_handles_labels()
            more = right.get_legend_handles_labels()
            handles, labels = left[0] + more[0], left[1] + more[1]
    fig.suptitle(f"drift and the decomposition per layer, {scores['config']['model']}")
    fig.legend(handles, labels, loc="lower center", ncol=3, fontsize=8, frameon=False)
    fig.tight_layout(rect=(0, 0.07, 1, 1))
    return fig


def _column(name: str, rows: list[Mapping[str, Any]]) -> np.ndarray:
    """One field of the layer rows as floats (None as NaN)."""
    return np.array([math.nan if r[name] is None else r[name] for r in rows], float)


def _plot_layers(ax: Any, rows: list[Mapping[str, Any]]) -> Any:
    """One scheme's panel: drift per layer on ``ax``, the fit's r past and before C on a
    twin axis on the right (returned)."""
    layer = _column("layer", rows)
    ax.axhline(0.0, color="0.8", linewidth=0.8)
    ax.plot(layer, _column("drift", rows), color="C3", marker="o", label="drift")
    ax.set_xlabel("layer")
    ax.set_ylabel("drift", color="C3")
    right = ax.twinx()
    right.plot(
        layer, _column("r_3axis_past_context", rows), color="C0", marker="s", label="r past C"
    )
    right.plot(
        layer,
        _column("r_3axis_before_context", rows),
        color="C0",
        linestyle=":",
        label="r before C",
    )
    right.set_ylabel("r of the fit", color="C0")
    return right


def decomposition_png(scores: Mapping[str, Any]) -> bytes:
    buf = io.BytesIO()
    decomposition_figure(scores).savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()
