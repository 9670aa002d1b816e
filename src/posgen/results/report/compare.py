"""How two runs differ (``posgen compare``).

Prints the config keys that differ, then every (model, task, metric, filter, kind,
scheme, rate) degradation present in either run with both values, the difference B - A and
whether the 95% CIs overlap, then the tolerance and fit-quality differences. Cells
present in only one run are listed as such, never dropped silently. Depth cells (scheme
``depth``) are not compared: one line says so where either run has them.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from posgen.results.folder.metrics import MetricSpec
from posgen.results.report.length import compare_lines
from posgen.results.scores.depth import DEPTH_SCHEME
from posgen.results.scores.run import load_scores

DEPTH_NOT_COMPARED = (
    "  depth cells (posgen run --kinds depth) are not compared here (their depth is not a "
    "rate): see each run's report, section Evidence depth"
)
KEY = ["model", "task", "metric", "filter", "kind", "scheme", "rate"]


def compare_runs(run_a: Path, run_b: Path) -> str:

    store_a, a = load_scores(run_a)
    store_b, b = load_scores(run_b)
    out = [f"A: {run_a}", f"B: {run_b}", "", "config differences:"]
    out += config_diff(store_a.config, store_b.config) or ["  (none)"]
    out += ["", "degradation (B - A; * = 95% CIs do not overlap):"]
    out += degradation_diff(a["degradation"], b["degradation"])
    if any(_has_depth_cells(x) for x in (a, b)):
        out.append(DEPTH_NOT_COMPARED)
    out += ["", "tolerance (on the threshold of each run):"]
    out += tolerance_diff(a["tolerance"], b["tolerance"])
    out += ["", "fit quality (mean r, 3-axis):"]
    for model in sorted(set(a["fit"]) | set(b["fit"])):
        ra, rb = (x["fit"].get(model, {}).get("r_3axis", math.nan) for x in (a, b))
        out.append(f"  {model:<28} A {ra:.3f}  B {rb:.3f}  B-A {rb - ra:+.3f}")

    out += compare_lines(run_a, run_b)
    return "\n".join(out)


def _has_depth_cells(scores: dict[str, Any]) -> bool:
    return bool((scores["perdoc"]["scheme"] == DEPTH_SCHEME).any())


def config_diff(a: dict[str, Any], b: dict[str, Any], prefix: str = "") -> list[str]:
    lines = []
    for key in sorted(set(a) | set(b)):
        va, vb = a.get(key), b.get(key)
        if isinstance(va, dict) and isinstance(vb, dict):
            lines += config_diff(va, vb, f"{prefix}{key}.")
        elif va != vb:
            lines.append(f"  {prefix}{key}: {va!r} -> {vb!r}")
    return lines


def degradation_diff(da, db) -> list[str]:
    merged = da.merge(db, on=KEY, how="outer", suffixes=("_a", "_b"), indicator=True)
    lines = []
    for r in merged.sort_values(KEY).to_dict(orient="records"):
        label = (
            f"  {r['model']:<24} {r['task']:<16} {_metric(r):<16} "
            f"{r['kind'] + ' ' + r['scheme']:<20} {r['rate']:>6g}"
        )
        if r["_merge"] != "both":
            lines.append(f"{label}  only in {'A' if r['_merge'] == 'left_only' else 'B'}")
            continue
        apart = r["ci_lo_b"] > r["ci_hi_a"] or r["ci_lo_a"] > r["ci_hi_b"]
        lines.append(
            f"{label}  A {r['degradation_a']:+.4f}  B {r['degradation_b']:+.4f}  "
            f"B-A {r['degradation_b'] - r['degradation_a']:+.4f}{' *' if apart else ''}"
        )
    return lines


def tolerance_diff(ta, tb) -> list[str]:
    key = ["model", "task", "metric", "filter", "kind", "scheme"]
    merged = ta.merge(tb, on=key, how="outer", suffixes=("_a", "_b"), indicator=True)
    lines = []
    for r in merged.sort_values(key).to_dict(orient="records"):
        label = f"  {r['model']:<24} {r['task']:<16} {_metric(r):<16} {r['kind']:<9}"
        if r["_merge"] != "both":
            lines.append(f"{label}  only in {'A' if r['_merge'] == 'left_only' else 'B'}")
            continue
        lines.append(
            f"{label}  tolerance A {r['tolerance_a']:g}  B {r['tolerance_b']:g}   "
            f"AUC A {r['auc_a']:.4f}  B {r['auc_b']:.4f}"
        )
    return lines


def _metric(row: dict[str, Any]) -> str:
    """``exact_match (strict-match)``; the bare name under lm-eval's ``none`` filter."""
    return MetricSpec(row["metric"], row["filter"]).label
