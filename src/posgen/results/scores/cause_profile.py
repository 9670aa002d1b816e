"""The profile of a ``posgen cause`` folder: the NLL of each replaced-logits cell, the
predicted logit change, and the relation to a ``posgen layers`` folder's sensitivity
profile; what its report draws (:func:`posgen.results.report.folder_reports.regenerate_cause`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

from posgen.results.folder.cause_config import CauseConfig, CauseFolder
from posgen.results.folder.layers_config import LayersFolder
from posgen.results.folder.store import RunConflictError
from posgen.results.scores.cause import layer_relation, nll_row, pooled_prediction
from posgen.results.scores.layers_profile import read_scores


class LayersRunError(ValueError):
    """A ``--layers-run`` folder that does not belong beside this run; says why."""


def check_layers_run(config: CauseConfig, layers_run: Path) -> dict[str, Any]:
    """The layers folder's settings if its profile can be related to this run: the same
    model, seed and documents, its scheme among the run's schemes, its scores written."""
    try:
        layers = LayersFolder.open(layers_run)
    except (RunConflictError, OSError, ValueError) as e:
        raise LayersRunError(f"--layers-run {layers_run}: {e}") from None
    other = layers.config
    scheme = other.scheme()
    problems = [
        f"{what} {theirs} (this run: {ours})"
        for what, theirs, ours in (
            ("model", other.model.label, config.model.label),
            ("seed", other.seed, config.seed),
            ("--limit", other.limit, config.limit),
        )
        if theirs != ours
    ]
    if scheme not in config.schemes:
        problems.append(f"scheme {scheme} (not among --positions {';'.join(config.schemes)})")
    if other.heads:
        problems.append("a per-head profile (--heads); give a per-layer one")
    if problems:
        raise LayersRunError(
            f"--layers-run {layers_run} is not this run's profile: " + "; ".join(problems)
        )
    if not (Path(layers_run) / "layers_scores.json").is_file():
        raise LayersRunError(
            f"--layers-run {layers_run}: no layers_scores.json; finish that posgen layers "
            "run first (rerun its command: it resumes)"
        )
    return {"path": str(layers_run), "scheme": scheme}


def nll_rows(folder: CauseFolder) -> list[dict[str, Any]]:
    """One row per finished cell beside the plain one (:func:`nll_row`)."""
    plain = folder.read_cell("plain")
    bll, words, tokens = plain["loglikelihood"], plain["words"], plain["tokens"]
    rows = []
    for cell, kwargs in folder.config.cells():
        if kwargs is None or not folder.has_cell(cell):
            continue
        layers = kwargs.get("layers")
        ll = folder.read_cell(cell)["loglikelihood"]
        rows.append(
            {
                "cell": cell,
                "form": kwargs["logits"],
                "layer": "all" if layers is None else int(layers[0]),
                **nll_row(bll, ll, words, tokens),
            }
        )
    return rows


def build_profile(folder: CauseFolder, layers_run: Path | None = None) -> dict[str, Any]:
    """The plain data the report draws (:mod:`posgen.results.report.cause`)."""
    import pandas as pd

    cfg = folder.config
    by_layer = by_scheme = pd.DataFrame()
    if cfg.schemes:  # none: no prediction (a learned-absolute model; the report says why)
        prediction = pd.read_parquet(folder.prediction_path)
        by_layer = pooled_prediction(prediction, ["scheme", "layer"])
        by_scheme = pooled_prediction(prediction, ["scheme"])
    profile: dict[str, Any] = {
        "model": cfg.model.label,
        "random_init": cfg.model.random_init,
        "positions": cfg.model.positions,
        "documents": cfg.limit,
        "schemes": list(cfg.schemes),
        "forms": list(cfg.forms),
        "controls": list(cfg.controls),
        "nll": nll_rows(folder),
        "prediction": by_scheme.to_dict(orient="records"),
        "prediction_layers": by_layer.to_dict(orient="records"),
        "relation": [],
        "layers_run": None,
    }
    if layers_run is not None:
        link = check_layers_run(cfg, layers_run)
        layers = read_scores(Path(layers_run) / "layers_scores.json")
        rows = layers["layers"]
        own = {
            k: {int(r["layer"]): float(r.get(k, math.nan)) for r in rows}
            for k in ("fit_r", "share_distance")
        }
        sensitivity = {int(r["layer"]): float(r["sensitivity"]) for r in rows}
        scheme_rows = by_layer[by_layer["scheme"] == link["scheme"]]
        profile["relation"] = layer_relation(sensitivity, scheme_rows, own)
        profile["layers_run"] = {
            **link,
            "layers": [{"layer": k, "sensitivity": v} for k, v in sorted(sensitivity.items())],
            "all_layers": layers["all"],
        }
    return profile
