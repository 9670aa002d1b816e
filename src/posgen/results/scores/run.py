"""A run folder's tidy tables and scores, rebuilt from its cells (read by the report, the
gate and ``posgen compare``)."""

from __future__ import annotations

import math
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

from posgen.perturbations import PerturbationError
from posgen.results.folder.config import RunConfig, Scoring
from posgen.results.folder.metrics import MetricSpec
from posgen.results.folder.plan import plan_cells
from posgen.results.folder.run_store import RunStore
from posgen.results.folder.schema import SchemaError
from posgen.results.folder.store import check_cell_record, read_parquet
from posgen.results.scores.association import cross_model
from posgen.results.scores.corpus import corpus_table
from posgen.results.scores.depth import DEPTH_SCHEME
from posgen.results.scores.metric_units import primary
from posgen.results.scores.scoring import (
    GROUP,
    degradation_table,
    fit_quality,
    model_summary,
    tolerance_table,
)
from posgen.results.scores.tolerance import band, resampled_figures
from posgen.results.tables.metric_list import Aggregations
from posgen.results.tables.tidy import (
    corpus_pairs,
    perdoc_rows,
    result_rows,
    task_metrics,
    unscorable_rows,
)


def load_scores(run_dir: Path | str) -> tuple[Any, dict[str, Any]]:
    """Open a run, rebuild its tidy tables from the cells and score them."""

    store, cells = read_run(run_dir)
    results, perdoc = result_rows(cells), perdoc_rows(cells)
    decomps = load_decompositions(store)
    fits = {m: fit_quality(d) for m, d in decomps.items()}
    config = store.run_config
    twins = {m.label for m in config.models if m.random_init}
    metrics = task_metrics(cells)
    aggregations = Aggregations(config.include_path)
    # depth cells (scheme depth: D is where the evidence sits, not a rate) stay out of
    # the rate axes, tolerance and the cross-model relation: the depth scores read them
    corpus = [c for c in corpus_pairs(cells) if c["scheme"] != DEPTH_SCHEME]
    rated = perdoc[perdoc["scheme"] != DEPTH_SCHEME]
    scores = score_tables(rated, fits, config.scoring, twins, metrics, corpus, aggregations)
    return store, {
        **scores,
        "results": results,
        "perdoc": perdoc,
        "decompositions": decomps,
        "cells": cells,
        "metrics": metrics,
        "unscorable": unscorable_rows(cells) + scores.pop("unloaded"),
    }


def read_run(run_dir: Path | str) -> tuple[RunStore, list[dict[str, Any]]]:
    """Open a run and read its finished cells, each checked and the sweep complete
    (:class:`SchemaError` naming a corrupt cell file or the missing cells)."""

    store = RunStore.open(run_dir)
    cells = store.read_cells()
    if not cells:
        raise SchemaError(f"{run_dir} has no finished cells yet; run `posgen run` first")
    for cell in cells:  # a corrupt cell file is bad input, named
        check_cell_record(cell, store.cell_path(cell.get("model", "?"), cell.get("cell_id", "?")))
    missing = missing_cells(store.run_config, cells)
    if missing:
        shown = ", ".join(missing[:4]) + (
            f" and {len(missing) - 4} more" if len(missing) > 4 else ""
        )
        raise SchemaError(
            f"{run_dir} is missing {len(missing)} finished cell(s) of its sweep ({shown}); "
            "finish it with `posgen run` and the same settings (it resumes)"
        )
    return store, cells


def missing_cells(config: RunConfig, cells: list[dict[str, Any]]) -> list[str]:
    """The cells of the config's plan (:func:`posgen.results.folder.plan.plan_cells`, per
    model) that have no finished record, as ``model: task unperturbed`` or ``model: task
    kind/scheme@rate seed S``. An ingested run has no plan: none."""
    if config.preset == "ingest":
        return []
    have = {(c["model"], *_cell_key(c["cell"])) for c in cells}
    out = []
    for model in config.models:
        try:
            plan = plan_cells(config, model)
        except PerturbationError as e:
            raise SchemaError(
                f"the run's sweep names a perturbation posgen cannot read: {e}"
            ) from None
        for cell in plan:
            if (model.label, *_cell_key(cell.record())) in have:
                continue
            if cell.kind == "none":
                out.append(f"{model.label}: {cell.task} unperturbed")
            else:
                what = f"{cell.kind}/{cell.scheme}@{cell.rate:g} seed {cell.seed}"
                out.append(f"{model.label}: {cell.task} {what}")
    return out


def _cell_key(cell: dict[str, Any]) -> tuple:
    return (cell["task"], cell["kind"], cell["scheme"], float(cell["rate"]), cell["seed"])


def load_decompositions(store) -> dict[str, Any]:
    out = {}
    for m in store.run_config.models:
        path = store.decomposition_path(m.label)
        if path.is_file():
            out[m.label] = read_parquet(path)
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
    metrics: Mapping[str, Sequence[MetricSpec]] | None = None,
    corpus: Sequence[Mapping[str, Any]] = (),
    aggregations: Aggregations | None = None,
) -> dict[str, Any]:
    """Every score of a run: degradation (per-document metrics from ``perdoc``, corpus
    metrics from ``corpus``: :func:`posgen.results.tables.tidy.corpus_pairs`) and
    tolerance tables, fit quality per model, and the cross-model correlations (fit
    quality r_3axis vs the interpolated tolerance and vs AUC, per task and kind, on each
    task's primary metric among ``metrics``; ``twins`` are the random-init models, not
    counted). ``aggregations`` loads corpus metrics' functions; ``unloaded`` lists those
    it could not load now."""
    import pandas as pd

    cfg = cfg or Scoring()
    degr = degradation_table(perdoc, cfg)
    corp, unloaded = corpus_table(corpus, cfg, aggregations)
    if len(corp):
        degr = pd.concat([degr, corp], ignore_index=True) if len(degr) else corp
        degr = degr.sort_values([*GROUP, "rate"], kind="stable", ignore_index=True)
    tol = tolerance_table(degr, cfg)
    summary = model_summary(tol, fits, metrics or {})
    firsts = {
        (t, s.metric, s.filter) for t, specs in (metrics or {}).items() if (s := primary(specs))
    }
    reps = resampled_figures(perdoc, cfg, only=firsts)
    corr = []
    for group, per_model in summary.items():
        task, kind = group.split("|")
        for y in ("tolerance_interp", "auc"):
            draws = {}
            for model, v in per_model.items():
                r = reps.get((model, task, v["metric"], v["filter"], kind, v["scheme"]))
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
        "unloaded": unloaded,
    }
