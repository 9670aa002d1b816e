"""Scores of ``posgen length --decompose``: per layer, attention drift beside the fit of the
logits before and past the trained context C.

Inputs: the per-(scheme, document) decomposition records (one row per (layer, head) with
``r_3axis_before_context``, ``r_3axis_past_context``, ``a_trend_rms_before``,
``a_trend_rms_past``; :mod:`posgen.harness.length.decompose`) and the length run's drift
rows (:func:`posgen.results.scores.length.drift_rows`).

- **Per layer and scheme**: each column's mean over heads and documents (plain means of r,
  no Fisher z), and ``r_drop = r_before − r_past`` (the mean drop; > 0: the layer's logits
  decompose less well past C).
- **Rank correlation** per scheme: Spearman's ρ over the layers between the layer's drift
  and its ``r_drop`` (average ranks for ties; layers with a non-finite value left out;
  NaN with fewer than 3 layers or a constant side). ρ > 0: the layers that drift more past
  C are the ones whose logits stop decomposing. Layers of one model are not independent
  samples, so its p is the within-model test of ``posgen layers``
  (:func:`posgen.results.scores.layers.relation`: the mirror-ring shift p of the levels and
  of the layer-to-layer changes, false-positive rate ≤ .05 for autocorrelated profiles in
  ``benchmarks/sim_layer_relation.py``); a relation counts when both are ≤ α.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from posgen.results.folder.length_config import scheme_folder
from posgen.results.folder.store import read_json, slug
from posgen.results.scores.layers import relation

COLUMNS = (
    "r_3axis_before_context",
    "r_3axis_past_context",
    "a_trend_rms_before",
    "a_trend_rms_past",
)
MIN_LAYERS = 3  # fewer layers: no rank correlation


def decomposition_path(folder: Path, scheme: str, document: str) -> Path:
    """Where ``posgen length --decompose`` writes one (scheme, document) record."""
    return scheme_folder(Path(folder) / "decompose", scheme) / f"{slug(document)}.json"


def read_decompositions(
    folder: Path, schemes: list[str], documents: list[str]
) -> list[dict[str, Any]]:
    """Every (scheme, document) decomposition record of a length folder; missing ones raise."""
    return [
        read_json(decomposition_path(folder, s, d), f"length decomposition {s} / {d}")
        for s in schemes
        for d in documents
    ]


def _mean(values: list[Any]) -> float:
    v = np.array([math.nan if x is None else x for x in values], dtype=np.float64)
    v = v[np.isfinite(v)]
    return float(v.mean()) if v.size else math.nan


def layer_rows(records: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tidy rows per (scheme, layer): the mean of each of ``COLUMNS`` over heads and
    documents, ``r_drop``, and the numbers of documents and head rows averaged. An ALiBi
    record holds two fits per head (``logit_part`` ``full``, the model's own logits with
    its bias, and ``qk``, the content part alone): the full logits' rows are averaged, as
    for every other family (the report says so)."""
    groups: dict[tuple[str, int], list[dict[str, Any]]] = {}
    docs: dict[tuple[str, int], set[str]] = {}
    for record in records:
        for head in record["heads"]:
            if head.get("logit_part", "full") != "full":
                continue
            key = (record["scheme"], int(head["layer"]))
            groups.setdefault(key, []).append(head)
            docs.setdefault(key, set()).add(record["document"])
    rows = []
    for (scheme, layer), heads in groups.items():
        row: dict[str, Any] = {"scheme": scheme, "layer": layer}
        row.update({c: _mean([h.get(c) for h in heads]) for c in COLUMNS})
        row["r_drop"] = row["r_3axis_before_context"] - row["r_3axis_past_context"]
        row["n_documents"], row["n_heads"] = len(docs[(scheme, layer)]), len(heads)
        rows.append(row)
    order = {s: k for k, s in enumerate(dict.fromkeys(r["scheme"] for r in records))}
    return sorted(rows, key=lambda r: (order[r["scheme"]], r["layer"]))


def rank_correlation(x: Sequence[float], y: Sequence[float]) -> tuple[float, int]:
    """Spearman's ρ of the finite pairs of ``x``, ``y`` (average ranks) and the number of
    pairs used; ρ is NaN with fewer than ``MIN_LAYERS`` pairs or a constant side."""
    from scipy.stats import rankdata

    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    keep = np.isfinite(a) & np.isfinite(b)
    n = int(keep.sum())
    if n < MIN_LAYERS:
        return math.nan, n
    ra, rb = rankdata(a[keep]), rankdata(b[keep])
    if ra.std() == 0 or rb.std() == 0:
        return math.nan, n
    return float(np.corrcoef(ra, rb)[0, 1]), n


def decomposition_scores(
    records: Sequence[dict[str, Any]], drift: Sequence[dict[str, Any]]
) -> dict[str, Any]:
    """``{"layers": rows, "rank_correlation": {scheme: {"rho", "n_layers", "p",
    "rho_changes", "p_changes"}}}``: the rows of :func:`layer_rows` with the layer's
    ``drift`` (NaN where the run has none) beside them, and Spearman's ρ between drift and
    ``r_drop`` over the layers of each scheme with the within-model test's p values."""
    by_key = {(r["scheme"], int(r["layer"])): r for r in drift}
    rows = layer_rows(records)
    for row in rows:
        found = by_key.get((row["scheme"], row["layer"]))
        row["drift"] = math.nan if found is None else found["drift"]
    correlation = {}
    for scheme in dict.fromkeys(r["scheme"] for r in rows):
        mine = [r for r in rows if r["scheme"] == scheme]
        drift, drop = [r["drift"] for r in mine], [r["r_drop"] for r in mine]
        rho, n = rank_correlation(drift, drop)
        (test,) = relation(drift, {"r_drop": drop})
        correlation[scheme] = {"rho": rho, "n_layers": n} | {
            k: test[k] for k in ("p", "rho_changes", "p_changes")
        }
    return {"layers": rows, "rank_correlation": correlation}
