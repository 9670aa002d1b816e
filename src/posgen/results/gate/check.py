"""The CI regression gate behind ``posgen baseline`` and ``posgen check``.

``posgen baseline RUN -o FILE`` stores one model's per-document degradations on each
task's primary metric (see :mod:`posgen.results.gate.baseline_file`). ``posgen check RUN
--baseline FILE`` pairs a new run of (a new checkpoint of) the model with it, document
by document, and for every (task, metric, kind, scheme, rate) cell tests whether the
candidate degrades more (:mod:`posgen.results.stats.paired_test`); with ``posgen run
--length``, also per length scheme whether the per-document NLL excess past the trained
context grew (:mod:`posgen.results.gate.length`; ``g`` is that excess, ``w`` tokens past C):

    δ_d    = g_cand,d - g_base,d              (per-document degradation difference)
    Δ      = Σ w δ / Σ w,  p = one-sided weighted paired t (H1: Δ > --tolerance)
    FAIL   if the Holm-adjusted p over all cells (length cells included) <= --alpha

so the chance of any false alarm on a same-model rerun is at most --alpha.

Exit status: 0 when nothing fails, 1 only for a measured regression, 2 on invalid input
(unreadable, partial or wrongly typed baseline, another suite, other limits, documents
or cells, other length settings, length in one run only, no such model, an unwritable
--junit-xml) with the reason.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

from posgen.results.gate.baseline_file import (
    BASELINE_KIND,
    BASELINE_VERSION,
    KEY,
    GateInputError,
    gate_cells,
    validate,
)

__all__ = ["BASELINE_KIND", "BASELINE_VERSION", "KEY", "GateInputError"]


def baseline_payload(run_dir: Path, model: str | None = None) -> dict[str, Any]:
    """The baseline of one model of a run (scores recomputed from the run's cells)."""
    from posgen import __version__
    from posgen.results.gate.length import length_section
    from posgen.results.scores.run import json_records, load_scores

    store, scores = load_scores(run_dir)
    model = pick_model(store, scores, model)
    tol = scores["tolerance"]
    tol = tol[tol["model"] == model]
    return {
        "kind": BASELINE_KIND,
        "baseline_version": BASELINE_VERSION,
        "posgen_version": __version__,
        "run": str(run_dir),
        "model": model,
        "config_hash": store.config_hash,
        "suite": suite_of(store.config),
        "limits": store.config.get("limits") or {},
        "seeds": store.config.get("seeds", 1),
        "scoring": store.config.get("scoring", {}),
        "cells": gate_cells(scores, model),
        "length": length_section(store.root, model),
        "tolerance": json_records(tol.drop(columns=["model"])),
    }


def pick_model(store, scores: dict[str, Any], model: str | None) -> str:
    models = sorted(set(scores["degradation"]["model"]))
    if model is not None:
        if model not in models:
            raise GateInputError(f"model {model!r} is not in {store.root}; it has {models}")
        return model
    real = [m for m in models if m not in random_init_models(store.config)]
    if len(real) != 1:
        raise GateInputError(f"{store.root} holds models {models}: name one with --model")
    return real[0]


def random_init_models(config: dict[str, Any]) -> set[str]:
    return {m["label"] for m in config.get("models", []) if m.get("random_init")}


def suite_of(config: dict[str, Any]) -> dict[str, Any]:
    """What must match between a baseline and a checked run."""
    return {"suite": config.get("suite"), "tasks": config.get("tasks")}


def load_baseline(path: Path) -> dict[str, Any]:
    from posgen.results.folder.schema import SchemaError
    from posgen.results.folder.store import read_json

    try:
        data = read_json(path, "baseline")
    except SchemaError as e:
        raise GateInputError(str(e)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise GateInputError(f"cannot read the baseline {path}: {e}") from None
    from posgen.results.gate.length import validate_section

    data = validate(data, path)
    validate_section(data["length"], f"{path}: length")
    return data


def compare(
    baseline: dict[str, Any], current: dict[str, Any], tolerance: float = 0.0, alpha: float = 0.05
) -> list[dict[str, Any]]:
    """One row per baseline cell: both degradations, the paired change, p (raw and
    Holm-adjusted over all cells) and the verdict; then one row per length scheme (a
    payload without a ``length`` entry has none). Mismatched input: GateInputError."""
    from posgen.results.stats.paired_test import holm

    if not (math.isfinite(tolerance) and tolerance >= 0 and 0 < alpha < 1):
        raise GateInputError("--tolerance must be a finite number >= 0 and --alpha in (0, 1)")
    if current["suite"] != baseline["suite"]:
        raise GateInputError(
            f"suite mismatch: baseline {baseline['suite']}, run {current['suite']}"
        )
    if current["limits"] != baseline["limits"]:
        raise GateInputError(
            f"limits mismatch: baseline scored {baseline['limits']} documents per task, the "
            f"run {current['limits']}; rerun with the baseline's --limit"
        )
    now = {tuple(c[k] for k in KEY): c for c in current["cells"]}
    base = {tuple(c[k] for k in KEY): c for c in baseline["cells"]}
    if set(now) != set(base):
        missing = sorted(set(base) - set(now), key=str)[:4]
        extra = sorted(set(now) - set(base), key=str)[:4]
        raise GateInputError(
            "the run and the baseline do not cover the same (task, metric, "
            f"kind, scheme, rate) cells: missing {missing}, extra {extra}; "
            "rerun with the baseline's settings or make a new baseline"
        )
    from posgen.results.gate.length import length_pairs

    pairs = [(key, base[key], now[key], "degradation") for key in sorted(base, key=str)]
    pairs += [(*p, "excess") for p in length_pairs(baseline.get("length"), current.get("length"))]
    rows = [_paired_row(*pair, tolerance) for pair in pairs]
    for row, adj in zip(rows, holm([r["p"] for r in rows]), strict=True):
        row["p_holm"] = float(adj)
        row["failed"] = bool(adj <= alpha)
    return rows


def _paired_row(
    key: tuple, b: dict[str, Any], c: dict[str, Any], value: str, tol: float
) -> dict[str, Any]:
    from posgen.results.stats.paired_test import weighted_paired_t

    where = _name(key)
    bd = dict(zip(b["docs"]["keys"], zip(b["docs"]["w"], b["docs"]["g"], strict=True), strict=True))
    cd = dict(zip(c["docs"]["keys"], zip(c["docs"]["w"], c["docs"]["g"], strict=True), strict=True))
    if set(bd) != set(cd):
        diff = sorted(set(bd) ^ set(cd))[:4]
        raise GateInputError(
            f"{where}: the run scored other documents than the baseline (e.g. {diff}); "
            "the gate pairs documents: rerun on the baseline's documents"
        )
    keys = sorted(bd)
    w = [bd[k][0] for k in keys]
    if not all(math.isclose(bd[k][0], cd[k][0], rel_tol=1e-9) for k in keys):
        raise GateInputError(f"{where}: document lengths differ from the baseline's")
    test = weighted_paired_t([cd[k][1] - bd[k][1] for k in keys], w, tol)
    return {
        **dict(zip(KEY, key, strict=True)),
        "baseline": b[value],
        "current": c[value],
        **test,
    }


def _name(key: tuple) -> str:
    """``task/metric/kind/scheme@rate`` (no ``@rate`` for a length cell)."""
    *head, rate = key
    return "/".join(map(str, head)) + ("" if rate is None else f"@{rate:g}")


def _rate(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:g}"


def format_table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'task':<22} {'metric':<16} {'kind/scheme':<20} {'rate':>6} {'baseline':>9} "
        f"{'current':>9} {'change/doc':>11} {'se':>7} {'p (Holm)':>9}  verdict"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['task']:<22} {r['metric']:<16} {r['kind'] + '/' + r['scheme']:<20} "
            f"{_rate(r['rate']):>6} {r['baseline']:>9.4f} {r['current']:>9.4f} "
            f"{r['change']:>+11.4f} {r['se']:>7.4f} {r['p_holm']:>9.3g}  "
            f"{'FAIL' if r['failed'] else 'ok'}"
        )
    return "\n".join(lines)


def junit_xml(rows: list[dict[str, Any]]) -> str:
    failures = sum(r["failed"] for r in rows)
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<testsuite name="posgen-gate" tests="{len(rows)}" failures="{failures}">',
    ]
    for r in rows:
        name = _name(tuple(r[k] for k in KEY))
        out.append(f'  <testcase classname="posgen.gate" name={quoteattr(name)}>')
        if r["failed"]:
            msg = (
                f"{'NLL excess past C' if r['rate'] is None else 'degradation'} "
                f"{r['current']:.4f} vs baseline {r['baseline']:.4f}: paired "
                f"change {r['change']:+.4f} per document (se {r['se']:.4f}), Holm p "
                f"{r['p_holm']:.3g}"
            )
            out.append(f"    <failure message={quoteattr(msg)}/>")
        out.append("  </testcase>")
    out.append("</testsuite>")
    return "\n".join(out) + "\n"
