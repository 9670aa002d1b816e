"""The tidy length tables of ``posgen run --length``: each scheme's effective length, its
bucket curve and its excess over the in-distribution window, gathered from every model's
``RUN/length/<model>/length_scores.json``."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posgen.results.folder.schema import (
    LENGTH_CURVE_COLUMNS,
    LENGTH_EFFECTIVE_COLUMNS,
    LENGTH_EXCESS_COLUMNS,
    frame,
)
from posgen.results.folder.store import read_json


def length_tables(run_root: Any) -> dict[str, Any]:
    """The tidy length tables of ``posgen run --length`` (``length_effective`` and
    ``length_curves``, schema.LENGTH_*_COLUMNS) from every ``RUN/length/<model>/
    length_scores.json``; empty dict when the run has no length folder."""
    effective, curves, excess = [], [], []
    for path in sorted(Path(run_root).glob("length/*/length_scores.json")):
        scores = read_json(path, "length scores")
        model, config = path.parent.name, scores["config"]
        for scheme, eff in scores["effective"].items():
            effective.append(
                {
                    "model": model,
                    "scheme": scheme,
                    "trained_context": int(config["trained_context"]),
                    "max_length": int(config["max_length"]),
                    **{k: eff[k] for k in LENGTH_EFFECTIVE_COLUMNS if k in eff},
                }
            )
        curves += [{"model": model, **row} for row in scores["curves"]]
        excess += _excess_rows(model, scores)
    if not effective:
        return {}
    tables = {
        "length_effective": frame(effective, LENGTH_EFFECTIVE_COLUMNS),
        "length_curves": frame(curves, LENGTH_CURVE_COLUMNS),
    }
    if excess:
        tables["length_excess"] = frame(excess, LENGTH_EXCESS_COLUMNS)
    return tables


def _excess_rows(model: str, scores: dict[str, Any]) -> list[dict[str, Any]]:
    """``length_excess`` rows of one model's scores (none for a run without the window)."""
    rows = []
    for row in scores.get("excess") or []:
        eff = scores["effective_window"][row["scheme"]]
        rows.append(
            {
                "model": model,
                "window_stride": int(scores["window_stride"]),
                **row,
                "window_effective_length": int(eff["effective_length"]),
                "window_censored": bool(eff["censored"]),
                "window_effective_low": eff["ci_low"],
                "window_effective_high": eff["ci_high"],
            }
        )
    return rows
