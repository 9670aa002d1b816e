"""A run folder's tidy tables and scores, rebuilt from its cells (read by the report, the
gate and ``posgen compare``)."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from posgen.results.folder.config import Scoring
from posgen.results.folder.schema import SchemaError
from posgen.results.folder.store import RunStore
from posgen.results.scores.association import cross_model
from posgen.results.scores.scoring import (
    degradation_table,
    fit_quality,
    model_summary,
    tolerance_table,
)
from posgen.results.scores.tolerance import band, resampled_figures
from posgen.results.tables.tidy import perdoc_rows, result_rows


def load_scores(run_dir: Path | str) -> tuple[Any, dict[str, Any]]:
    """Open a run, rebuild its tidy tables from the cells and score them."""

    store = RunStore.open(run_dir)
    cells = store.read_cells()
    if not cells:
        raise SchemaError(f"{run_dir} has no finished cells yet; run `posgen run` first")
    results, perdoc = result_rows(cells), perdoc_rows(cells)
    decomps = load_decompositions(store)
    fits = {m: fit_quality(d) for m, d in decomps.items()}
    config = store.run_config
    twins = {m.label for m in config.models if m.random_init}
    scores = score_tables(perdoc, fits, config.scoring, twins)
    return store, {
        **scores,
        "results": results,
        "perdoc": perdoc,
        "decompositions": decomps,
        "cells": cells,
    }


def load_decompositions(store) -> dict[str, Any]:
    import pandas as pd

    out = {}
    for m in store.run_config.models:
        path = store.decomposition_path(m.label)
        if path.is_file():
            out[m.label] = pd.read_parquet(path)
    return out


def json_records(df) -> list[dict[str, Any]]:
    """Rows of ``df`` as JSON-able dicts, non-finite floats as None."""
    out = []
    for rec in df.to_dict(orient="records"):
        out.append(
            {
                k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in rec.items()
            }
        )
    return out


def score_tables(
    perdoc,
    fits: Mapping[str, Mapping[str, float]],
    cfg: Scoring | None = None,
    twins: Collection[str] = (),
) -> dict[str, Any]:
    """Every score of a run: degradation and tolerance tables, fit quality per model, and
    the cross-model correlations (fit quality r_3axis vs the interpolated tolerance and
    vs AUC, per task and kind; ``twins`` are the random-init models, not counted)."""

    cfg = cfg or Scoring()
    degr = degradation_table(perdoc, cfg)
    tol = tolerance_table(degr, cfg)
    summary = model_summary(tol, fits)
    reps = resampled_figures(perdoc, cfg)
    corr = []
    for group, per_model in summary.items():
        task, kind = group.split("|")
        for y in ("tolerance_interp", "auc"):
            draws = {}
            for model, v in per_model.items():
                r = reps.get((model, task, v["metric"], kind, v["scheme"]))
                if r is not None:
                    draws[model] = r[y]
                    v[f"{y}_lo"], v[f"{y}_hi"] = band(r[y], cfg.confidence)
            res = cross_model(per_model, "r_3axis", y, seed=cfg.seed, twins=twins, resampled=draws)
            corr.append({"task": task, "kind": kind, **res})
    return {
        "degradation": degr,
        "tolerance": tol,
        "fit": dict(fits),
        "summary": summary,
        "cross_model": corr,
    }
