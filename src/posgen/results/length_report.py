"""The length run's report block: one plot of NLL curves, one table, the drift table."""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from typing import Any

import numpy as np


def curves_figure(scores: Mapping[str, Any]) -> Any:
    """A matplotlib ``Figure`` (object API, no global backend switch): mean NLL per
    position bucket for each scheme with its t-interval band; dotted: the trained context."""
    from matplotlib.figure import Figure

    fig = Figure(figsize=(8, 4.5))
    ax = fig.add_subplot(1, 1, 1)
    schemes = list(scores["effective"])
    for scheme in schemes:
        rows = [r for r in scores["curves"] if r["scheme"] == scheme]
        x = np.array([(r["start"] + r["stop"]) / 2 for r in rows])
        y = np.array([r["nll"] for r in rows], dtype=float)
        lo = np.array([r["ci_low"] for r in rows], dtype=float)
        hi = np.array([r["ci_high"] for r in rows], dtype=float)
        (line,) = ax.plot(x, y, marker=".", label=scheme)
        if np.isfinite(lo).any():
            ax.fill_between(x, lo, hi, color=line.get_color(), alpha=0.15, linewidth=0)
    ax.axvline(scores["config"]["trained_context"], color="0.3", linestyle=":", label="trained C")
    ax.set_xlabel("token position")
    ax.set_ylabel("NLL (nats / token)")
    ax.set_title(f"NLL by position, {scores['config']['model']}")
    ax.legend(fontsize=8)
    return fig


def curves_png(scores: Mapping[str, Any]) -> bytes:
    buf = io.BytesIO()
    curves_figure(scores).savefig(buf, format="png", dpi=110, bbox_inches="tight")
    return buf.getvalue()


def _f(x: float, fmt: str = ".3f") -> str:
    return "–" if x is None or not math.isfinite(x) else format(x, fmt)


def markdown(scores: Mapping[str, Any], plot_name: str | None = "length_curves.png") -> str:
    """The report block: effective lengths, NLL past C, and per-layer drift."""
    cfg = scores["config"]
    c = int(cfg["trained_context"])
    lines = [
        "## Length generalization",
        "",
        f"Model `{cfg['model']}`, trained context C = {c}, evaluated to {cfg['max_length']} "
        f"tokens, buckets of {cfg['bucket_width']}, {len(cfg['documents'])} document(s). "
        f"Effective length: last position whose bucket NLL stays within "
        f"ln(1 + {cfg['threshold']:g}) of the in-context mean over [C/2, C).",
        "",
    ]
    if plot_name:
        lines += [f"![NLL by position]({plot_name})", ""]
    lines += [
        "| scheme | NLL in [C/2, C) | NLL past C | effective length | 95% interval |",
        "|---|---|---|---|---|",
    ]
    for scheme, eff in scores["effective"].items():
        past = [r["nll"] for r in scores["curves"] if r["scheme"] == scheme and r["start"] >= c]
        past_mean = float(np.nanmean(past)) if past else math.nan
        length = f"{'≥ ' if eff['censored'] else ''}{eff['effective_length']}"
        lines.append(
            f"| {scheme} | {_f(eff['reference_nll'])} | {_f(past_mean)} | {length} | "
            f"[{eff['ci_low']:.0f}, {eff['ci_high']:.0f}] |"
        )
    if any(e["few_documents"] for e in scores["effective"].values()):
        lines += [
            "",
            "With fewer than 5 documents the bootstrap interval is only the spread of a few "
            "distinct resamples, not a calibrated 95% interval; curve bands are t intervals "
            "over documents.",
        ]
    lines += _drift_lines(scores)
    return "\n".join(lines) + "\n"


def _drift_lines(scores: Mapping[str, Any]) -> list[str]:
    rows = scores["drift"]
    if not rows:
        return []
    schemes = list(dict.fromkeys(r["scheme"] for r in rows))
    layers = sorted({r["layer"] for r in rows})
    table = {(r["scheme"], r["layer"]): r for r in rows}
    out = [
        "",
        "Attention-output drift past C, per layer: mean over documents of "
        "cos(o_t, m) on [C/2, C) minus on [C, end), m the in-context mean direction "
        "(0: in distribution); in brackets the log-norm ratio past C vs in context.",
        "",
        "| layer | " + " | ".join(schemes) + " |",
        "|---|" + "---|" * len(schemes),
    ]
    for layer in layers:
        cells = []
        for s in schemes:
            r = table.get((s, layer))
            cells.append(
                "–" if r is None else f"{_f(r['drift'])} ({_f(r['log_norm_ratio'], '+.2f')})"
            )
        out.append(f"| {layer} | " + " | ".join(cells) + " |")
    return out
