"""The length run's report block: one plot of NLL curves, one table, the drift table."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any

import numpy as np

from posgen.results.folder import schema
from posgen.results.report.figure_record import png_bytes
from posgen.results.report.length_decompose import DECOMPOSITION_NOTE, scheme_tables
from posgen.results.report.length_window import (
    WINDOW_HEADER,
    WINDOW_NOTE,
    excess_axes,
    excess_table,
    has_window,
    window_cells,
)
from posgen.results.scores.length import FEW_DOCS


def curves_figure(scores: Mapping[str, Any]) -> Any:
    """A matplotlib ``Figure`` (object API, no global backend switch): mean NLL per
    position bucket for each scheme with its t-interval band; dotted: the trained context;
    with the window pass, a second panel: the excess over it per scheme."""
    from matplotlib.figure import Figure

    window = has_window(scores)
    fig = Figure(figsize=(8, 8.5 if window else 4.5), layout="constrained")
    ax = fig.add_subplot(2 if window else 1, 1, 1)
    if window:
        excess_axes(fig.add_subplot(2, 1, 2, sharex=ax), scores)
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
    """:func:`curves_figure` as PNG bytes, with the record of what it draws."""
    return png_bytes(curves_figure(scores))


def _f(x: float, fmt: str = ".3f") -> str:
    return "–" if x is None or not math.isfinite(x) else format(x, fmt)


def effective_table(scores: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows: scheme, in-context NLL, mean NLL past C, effective length vs
    [C/2, C), interval, and with the window pass the excess past C over it, the effective
    length vs the window and its interval."""
    c = int(scores["config"]["trained_context"])
    header = [
        "scheme",
        "NLL in [C/2, C)",
        "NLL past C",
        "effective length vs [C/2, C)",
        "95% interval",
    ]
    window = has_window(scores)
    header += WINDOW_HEADER if window else []
    rows = []
    for scheme, eff in scores["effective"].items():
        past = [r["nll"] for r in scores["curves"] if r["scheme"] == scheme and r["start"] >= c]
        past_mean = float(np.nanmean(past)) if past else math.nan
        length = f"{'≥ ' if eff['censored'] else ''}{eff['effective_length']}"
        interval = f"[{eff['ci_low']:.0f}, {eff['ci_high']:.0f}]"
        row = [scheme, _f(eff["reference_nll"]), _f(past_mean), length, interval]
        rows.append(row + (window_cells(scores, scheme) if window else []))
    return header, rows


def drift_table(scores: Mapping[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Header and rows: layer, then per scheme ``drift (log-norm ratio)``."""
    rows_in = scores["drift"]
    schemes = list(dict.fromkeys(r["scheme"] for r in rows_in))
    table = {(r["scheme"], r["layer"]): r for r in rows_in}
    rows = []
    for layer in sorted({r["layer"] for r in rows_in}):
        cells = [str(layer)]
        for s in schemes:
            r = table.get((s, layer))
            cells.append(
                "–" if r is None else f"{_f(r['drift'])} ({_f(r['log_norm_ratio'], '+.2f')})"
            )
        rows.append(cells)
    return ["layer", *schemes], rows


def intro(scores: Mapping[str, Any]) -> str:
    cfg = scores["config"]
    return (
        f"Model `{cfg['model']}`, trained context C = {cfg['trained_context']}, evaluated to "
        f"{cfg['max_length']} tokens, buckets of {cfg['bucket_width']}, "
        f"{len(cfg['documents'])} document(s), one forward per document and scheme. Effective "
        f"length vs [C/2, C): the start of the first bucket at or after C whose mean NLL "
        f"exceeds the mean over [C/2, C) by more than ln(1 + {cfg['threshold']:g}) (≥: never "
        f"within the run)."
        + (
            f" In-distribution window: stride S = {cfg['window_stride']}, so every token past "
            f"C is scored with {cfg['trained_context'] - cfg['window_stride']} … "
            f"{cfg['trained_context'] - 1} tokens of context."
            if cfg.get("window_stride")
            else ""
        )
    )


FEW_DOCS_NOTE = (
    "With fewer than 5 documents the bootstrap interval is only the spread of a few "
    "distinct resamples, not a calibrated 95% interval; curve bands are t intervals over "
    "documents."
)
DRIFT_NOTE = (
    "Attention-output drift past C, per layer: mean over documents of cos(o_t, m) on "
    "[C/2, C) minus on [C, end), m the in-context mean direction of the layer's attention "
    "outputs (0: in distribution); in brackets the log-norm ratio past C vs in context."
)


def _md_table(header: list[str], rows: list[list[str]]) -> list[str]:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    return out + ["| " + " | ".join(r) + " |" for r in rows]


def markdown(
    scores: Mapping[str, Any],
    plot_name: str | None = "length_curves.png",
    decomposition_plot: str | None = "length_decomposition.png",
) -> str:
    """The report block: effective lengths, NLL past C, per-layer drift and, with
    ``scores["decomposition"]`` (``posgen length --decompose``), drift beside the fit's r
    per layer."""
    lines = ["## Length generalization", "", intro(scores), ""]
    if plot_name:
        lines += [f"![NLL by position]({plot_name})", ""]
    lines += _md_table(*effective_table(scores))
    if any(e["few_documents"] for e in scores["effective"].values()):
        lines += ["", FEW_DOCS_NOTE]
    if has_window(scores):
        lines += ["", WINDOW_NOTE, "", *_md_table(*excess_table(scores))]
    if scores["drift"]:
        lines += ["", DRIFT_NOTE, "", *_md_table(*drift_table(scores))]
    tables = scheme_tables(scores)
    if tables:
        lines += ["", "### Drift and the decomposition past C", "", DECOMPOSITION_NOTE]
        if decomposition_plot:
            lines += ["", f"![drift and r per layer]({decomposition_plot})"]
        for caption, header, rows in tables:
            lines += ["", caption, "", *_md_table(header, rows)]
    return "\n".join(lines) + "\n"


def read_length_table(run_root: Any, name: str) -> Any:
    """``RUN/<name>.parquet`` (``length_effective``, ``length_curves`` or ``length_excess``),
    checked against its schema; None for a run without ``--length`` (and ``length_excess``
    also for runs made before the window pass). A run with length folders but no
    table was written before the tables existed: rebuild them with ``posgen report``."""
    from pathlib import Path

    import pandas as pd

    root = Path(run_root)
    path = root / f"{name}.parquet"
    if not path.is_file():
        if name != "length_excess" and any(root.glob("length/*/length_scores.json")):
            raise schema.SchemaError(
                f"{root} has length results but no {name}.parquet; run `posgen report "
                f"{root}` to rebuild its tables"
            )
        return None
    df = pd.read_parquet(path)
    columns = {
        "length_effective": schema.LENGTH_EFFECTIVE_COLUMNS,
        "length_curves": schema.LENGTH_CURVE_COLUMNS,
        "length_excess": schema.LENGTH_EXCESS_COLUMNS,
    }[name]
    schema.validate_frame(df, columns, str(path))
    return df


def run_blocks(run_root: Any) -> list[tuple]:
    """Report blocks (``posgen.results.report.render``) for every model of the run's length
    tables (effective lengths and curves from ``length_effective``/``length_curves``;
    the config and drift from ``RUN/length/<model>/length_scores.json``); none without."""
    import json
    from pathlib import Path

    effective = read_length_table(run_root, "length_effective")
    if effective is None:
        return []
    curves = read_length_table(run_root, "length_curves")
    blocks: list[tuple] = []
    for model in sorted(effective["model"].unique()):
        path = Path(run_root) / "length" / model / "length_scores.json"
        scores = json.loads(path.read_text(encoding="utf-8"))
        rows = effective[effective["model"] == model]
        scores["effective"] = {r["scheme"]: r for r in rows.to_dict("records")}
        scores["curves"] = curves[curves["model"] == model].to_dict("records")
        blocks += [("h", 2, f"Length generalization: {scores['config']['model']}")]
        blocks += [("p", intro(scores)), ("table", *effective_table(scores))]
        if any(int(e["n_documents"]) < FEW_DOCS for e in scores["effective"].values()):
            blocks.append(("p", FEW_DOCS_NOTE))
        blocks.append(("img", "NLL by position per length scheme", curves_png(scores)))
        if has_window(scores):
            blocks += [("p", WINDOW_NOTE), ("table", *excess_table(scores))]
        if scores["drift"]:
            blocks += [("p", DRIFT_NOTE), ("table", *drift_table(scores))]
    return blocks


def _effective_by_key(run_root: Any) -> dict[tuple[str, str], dict[str, Any]]:
    table = read_length_table(run_root, "length_effective")
    if table is None:
        return {}
    return {(r["model"], r["scheme"]): r for r in table.to_dict("records")}


def _window_by_key(run_root: Any) -> dict[tuple[str, str], dict[str, Any]]:
    """Per (model, scheme) the effective length vs the in-distribution window, from
    ``length_excess`` (empty for a run made before the window pass)."""
    table = read_length_table(run_root, "length_excess")
    if table is None:
        return {}
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for r in table.to_dict("records"):
        out.setdefault(
            (r["model"], r["scheme"]),
            {
                "effective_length": r["window_effective_length"],
                "censored": r["window_censored"],
                "ci_low": r["window_effective_low"],
                "ci_high": r["window_effective_high"],
            },
        )
    return out


def _show_effective(e: dict[str, Any] | None) -> str:
    if e is None:
        return "–"
    mark = "≥" if e["censored"] else ""
    return f"{mark}{e['effective_length']} [{e['ci_low']:.0f}, {e['ci_high']:.0f}]"


def compare_lines(run_a: Any, run_b: Any) -> list[str]:
    """``posgen compare``'s length section: per (model, scheme) the effective length in
    each run with its interval, vs [C/2, C) and, on a second line where either run has
    the window pass, vs the in-distribution window ("–" for a run without it); entries
    present in one run only are listed as such."""
    a, b = _effective_by_key(run_a), _effective_by_key(run_b)
    if not a and not b:
        return []
    wa, wb = _window_by_key(run_a), _window_by_key(run_b)
    lines = [
        "",
        "effective length (posgen run --length; interval in brackets), vs [C/2, C)"
        + (" and vs the in-distribution window:" if wa or wb else ":"),
    ]
    for key in sorted(set(a) | set(b)):
        label = f"  {key[0]:<28} {key[1]:<18}"
        if key not in a or key not in b:
            lines.append(f"{label}  only in {'A' if key in a else 'B'}")
            continue
        lines.append(f"{label}  A {_show_effective(a[key])}  B {_show_effective(b[key])}")
        if key in wa or key in wb:
            window = f"A {_show_effective(wa.get(key))}  B {_show_effective(wb.get(key))}"
            lines.append(f"  {'':<28} {'vs window':<18}  {window}")
    return lines
