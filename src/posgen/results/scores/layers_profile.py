"""The profile of a ``posgen layers`` folder: per layer (or head) the degradation of its
cells against the plain one, beside the fit and drift covariates; what its report draws
(:func:`posgen.results.report.folder_reports.regenerate_layers`)."""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from posgen.results.folder.layers_config import LayersFolder, cell_name
from posgen.results.folder.store import read_json
from posgen.results.scores.layers import additivity, degradation_row, relation


def covariates(
    folder: LayersFolder, length_run: Path | None, by_head: bool = False
) -> dict[str, dict[Any, float]]:
    """Per layer (or per ``(layer, head)``): fit r (mean ``r_3axis`` over documents, and
    heads for a layer), distance share, and drift past the trained context of the plain
    model (``none`` scheme of a length run; per layer only)."""
    out: dict[str, dict[Any, float]] = {}
    if folder.decomposition_path.is_file():
        import pandas as pd

        table = pd.read_parquet(folder.decomposition_path)
        if "logit_part" in table.columns:  # ALiBi: the full logits (bias included)
            table = table[table["logit_part"] == "full"]
        keys = ["layer", "head"] if by_head else ["layer"]
        means = table.groupby(keys)[["r_3axis", "share_distance"]].mean()
        index = [tuple(int(v) for v in k) if by_head else int(k) for k in means.index]
        out["fit_r"] = dict(zip(index, means["r_3axis"], strict=True))
        out["share_distance"] = dict(zip(index, means["share_distance"], strict=True))
    if length_run is not None and not by_head:
        out["drift"] = read_drift(length_run)
    return out


def read_drift(length_run: Path) -> dict[int, float]:
    """Per-layer drift of the ``none`` scheme from a length folder's ``length_scores.json``."""

    scores = read_json(Path(length_run) / "length_scores.json", "length scores")
    rows = [r for r in scores.get("drift", []) if r.get("scheme") == "none"]
    if not rows:
        raise ValueError(
            f"{length_run}: no drift of the plain model (scheme 'none'); run posgen length "
            "with 'none' among its schemes"
        )
    return {int(r["layer"]): float(r["drift"]) for r in rows}


def build_profile(folder: LayersFolder, length_run: Path | None = None) -> dict[str, Any]:
    """The plain-data profile the report draws (see :mod:`posgen.results.report.layers`)."""

    cfg = folder.config
    plain = folder.read_cell("plain")
    bll, words = plain["loglikelihood"], plain["words"]
    by_head = bool(cfg.heads)
    cov = covariates(folder, length_run, by_head)
    layers = []
    for i in cfg.layers:
        for h in range(cfg.heads or 0) if by_head else [None]:
            pll = folder.read_cell(cell_name(i, h))["loglikelihood"]
            row = {"layer": i, **({} if h is None else {"head": h})}
            row.update(degradation_row(bll, pll, words))
            key = i if h is None else (i, h)
            row.update({k: float(v.get(key, math.nan)) for k, v in cov.items()})
            layers.append(row)
    everywhere = {
        "cell": "all",
        **degradation_row(bll, folder.read_cell("all")["loglikelihood"], words),
    }
    s = [r["sensitivity"] for r in layers]
    return {
        "model": cfg.model.label,
        "scheme": cfg.scheme(),
        "documents": len(words),
        **({"heads": cfg.heads} if by_head else {}),
        "layers": layers,
        "all": everywhere,
        "additivity": additivity([{**r, "cell": str(r["layer"])} for r in layers] + [everywhere]),
        "relation": relation(s, {k: [r[k] for r in layers] for k in cov}),
    }


def json_safe(obj: Any) -> Any:
    """The profile as ``layers_scores.json`` holds it: non-finite floats as ``null``."""
    if isinstance(obj, dict):
        return {k: json_safe(v) for k, v in obj.items()}
    if isinstance(obj, list | tuple):
        return [json_safe(v) for v in obj]
    if isinstance(obj, float | np.floating):
        return float(obj) if math.isfinite(obj) else None
    if isinstance(obj, np.integer):
        return int(obj)
    return obj


def read_scores(path: Path) -> dict[str, Any]:
    """A ``layers_scores.json`` read back as the profile it was written from (``null`` to
    NaN): what the report drew, ready to draw again."""

    def nan(obj: Any) -> Any:
        if isinstance(obj, dict):
            return {k: nan(v) for k, v in obj.items()}
        if isinstance(obj, list):
            return [nan(v) for v in obj]
        return math.nan if obj is None else obj

    return nan(read_json(path, "layers scores"))
