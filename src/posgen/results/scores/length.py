"""Scores of a length run: NLL curves by position, effective length, attention drift.

Documents are the independent units (positions within a document are strongly
dependent). Inputs are the per-(scheme, document) records of
:mod:`posgen.harness.length.runner`: bucket sums ``nll_sum[b]``, ``count[b]`` and drift sums.

- **Curve**: for bucket b, each document's mean NLL ``y_db = nll_sum/count``; the curve is
  ``ȳ_b = mean_d y_db`` with a t interval ``ȳ_b ± t_{0.975, D−1} · s_b / √D`` over the D
  documents (no interval with D = 1). With few documents the t interval is wide and
  assumes roughly normal per-document means; it is stated with D.
- **Reference** (in-context NLL): the count-weighted mean NLL over the buckets that lie in
  ``[C/2, C)`` (C: trained context), per document, then averaged over documents.
- **Effective length**: with ``τ = ln(1 + threshold)`` (threshold 0.10: PPL within +10%),
  ``L_eff = start of the first bucket at or after C whose ȳ_b > ref + τ`` (the end of
  the last bucket that stays within); ``= max_length`` and *censored* when none crosses.
  The search starts at C, not inside the trained context: on natural text the in-context
  bucket means of a few documents vary by more than τ (0.095 nats at +10%), which would
  put spurious crossings before C; so L_eff ≥ C by construction, and the curve shows
  the in-context part.
  Its interval: percentile bootstrap over documents (resample D documents with
  replacement, recompute reference, curve and crossing; 2000 resamples, seeded). The
  bootstrap carries the uncertainty of both the reference and the curve; it lives on the
  bucket grid. With D < 5 it is only the spread of a few distinct resamples (D = 2 has 3),
  not a calibrated 95% interval, and the report says so.
- **Excess past C** (what ``posgen check`` gates, per document): the count-weighted mean
  NLL over the buckets from the first one starting at or after C, minus the document's
  reference; weighted by its tokens there (:func:`document_excess`).
- **Drift**: per layer, each document's ``drift_ℓ`` (cosine to the in-context mean
  direction, reference minus past-C) and log-norm ratio; mean over documents with a t
  interval (see :mod:`posgen.harness.length.drift`).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from posgen.perturbations.seeding import item_rng
from posgen.results.folder.length_config import LengthConfig, reference_buckets, scheme_folder
from posgen.results.folder.store import read_json, slug
from posgen.results.scores.length_drift import DriftSums

N_BOOT = 2000
FEW_DOCS = 5


def t_interval(values: np.ndarray, level: float = 0.95) -> tuple[float, float, float]:
    """Mean and t interval over the first axis of ``values`` ``[D]`` (NaN bounds if D < 2)."""
    from scipy import stats

    v = np.asarray(values, dtype=np.float64)
    v = v[np.isfinite(v)]
    if v.size == 0:
        return math.nan, math.nan, math.nan
    mean = float(v.mean())
    if v.size < 2:
        return mean, math.nan, math.nan
    half = float(stats.t.ppf(0.5 + level / 2, v.size - 1) * v.std(ddof=1) / math.sqrt(v.size))
    return mean, mean - half, mean + half


@dataclass(frozen=True)
class SchemeData:
    """One scheme's per-document arrays: ``sums``, ``counts`` ``[D, buckets]``."""

    scheme: str
    documents: tuple[str, ...]
    sums: np.ndarray
    counts: np.ndarray
    drift: tuple[tuple[np.ndarray, np.ndarray], ...]  # per document: (drift [L], log-norm [L])


def result_path(folder: Path, scheme: str, document: str) -> Path:
    """Where ``posgen length`` writes one (scheme, document) record."""

    return scheme_folder(Path(folder) / "docs", scheme) / f"{slug(document)}.json"


def read_records(folder: Path, schemes: list[str], documents: list[str]) -> list[dict[str, Any]]:
    """Every (scheme, document) record of a length folder, scheme-major; missing ones raise."""

    return [
        read_json(result_path(folder, s, d), f"length result {s} / {d}")
        for s in schemes
        for d in documents
    ]


def gather(records: Sequence[dict[str, Any]]) -> dict[str, SchemeData]:
    """Group runner records by scheme (order kept)."""

    by: dict[str, list[dict[str, Any]]] = {}
    for r in records:
        by.setdefault(r["scheme"], []).append(r)
    out = {}
    for scheme, rs in by.items():
        drift = tuple(DriftSums.from_dict(r["drift"]).layer_drift() for r in rs if r["drift"])
        out[scheme] = SchemeData(
            scheme,
            tuple(r["document"] for r in rs),
            np.array([r["nll_sum"] for r in rs], dtype=np.float64),
            np.array([r["count"] for r in rs], dtype=np.float64),
            drift,
        )
    return out


def past_context_start(width: int, trained_context: int) -> int:
    """Index of the first bucket starting at or after C (the effective-length search and
    the gate's excess start there)."""
    return -(-trained_context // width)


def document_reference(sums: np.ndarray, counts: np.ndarray, ref_idx: np.ndarray) -> np.ndarray:
    """Each document's count-weighted mean NLL over the reference buckets: ``[D]``."""
    return sums[:, ref_idx].sum(axis=1) / counts[:, ref_idx].sum(axis=1)


def document_excess(
    sums: np.ndarray, counts: np.ndarray, width: int, trained_context: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per document, the NLL excess past C and its token weight (the gate's length value).

        e_d = Σ_{b ≥ b_C} sum_db / Σ_{b ≥ b_C} count_db  −  ref_d,    w_d = Σ_{b ≥ b_C} count_db

    with ``b_C`` = :func:`past_context_start` and ``ref_d`` = :func:`document_reference`
    over :func:`reference_buckets` (the reference of the effective length). ``sums``,
    ``counts``: ``[D, B]``; returns ``e``, ``w``: ``[D]``. Raises if no bucket starts at or
    after C, or a document has no token there.
    """
    n_buckets = sums.shape[1]
    ref = document_reference(sums, counts, reference_buckets(width, n_buckets, trained_context))
    start = past_context_start(width, trained_context)
    weight = counts[:, start:].sum(axis=1)
    if start >= n_buckets or not (weight > 0).all():
        raise ValueError(
            f"no tokens at or after the trained context {trained_context} (buckets of "
            f"width {width}, {n_buckets} buckets): the excess past C needs max length > C"
        )
    return sums[:, start:].sum(axis=1) / weight - ref, weight


def crossing(
    sums: np.ndarray, counts: np.ndarray, ref_idx: np.ndarray, tau: float, start: int
) -> tuple[int | None, float]:
    """First bucket index ≥ ``start`` whose document-mean NLL exceeds ``reference + tau``
    (None if none), and the reference. ``sums``, ``counts``: ``[D, B]``."""
    with np.errstate(invalid="ignore", divide="ignore"):
        means = sums / counts
    curve = np.nanmean(means, axis=0)
    reference = float(np.mean(document_reference(sums, counts, ref_idx)))
    over = np.flatnonzero(curve[start:] > reference + tau)
    return (None if over.size == 0 else int(start + over[0])), reference


def effective_length(
    data: SchemeData, width: int, trained_context: int, max_length: int, threshold: float, seed: int
) -> dict[str, Any]:
    """Effective length, its bootstrap interval and the reference NLL (see module doc)."""
    n_buckets = data.sums.shape[1]
    ref_idx = reference_buckets(width, n_buckets, trained_context)
    tau = math.log1p(threshold)

    def length_of(b: int | None) -> int:
        return max_length if b is None else int(b * width)

    start = past_context_start(width, trained_context)
    first, reference = crossing(data.sums, data.counts, ref_idx, tau, start)
    d = data.sums.shape[0]
    rng = item_rng(seed, "length/effective_length/bootstrap", data.scheme)
    boot = np.empty(N_BOOT)
    for k in range(N_BOOT):
        pick = rng.integers(0, d, d)
        boot[k] = length_of(crossing(data.sums[pick], data.counts[pick], ref_idx, tau, start)[0])
    return {
        **crossing_summary(length_of(first), first is None, boot),
        "reference_nll": reference,
        "threshold_nll": reference + tau,
        "n_documents": d,
        "few_documents": d < FEW_DOCS,
    }


def crossing_summary(length: int, censored: bool, boot: np.ndarray) -> dict[str, Any]:
    """An effective length, whether it is censored, and its 95% percentile-bootstrap
    interval from the resampled lengths ``boot`` ``[N_BOOT]``."""
    return {
        "effective_length": length,
        "censored": censored,
        "ci_low": float(np.quantile(boot, 0.025)),
        "ci_high": float(np.quantile(boot, 0.975)),
    }


def curve_rows(data: SchemeData, width: int) -> list[dict[str, Any]]:
    """Tidy rows: scheme, bucket, start, stop, mean NLL, t-interval bounds, D."""
    with np.errstate(invalid="ignore", divide="ignore"):
        means = data.sums / data.counts
    return bucket_rows(data.scheme, means, width, "nll", range(means.shape[1]))


def bucket_rows(
    scheme: str, values: np.ndarray, width: int, field: str, buckets: Sequence[int]
) -> list[dict[str, Any]]:
    """Per bucket b of ``buckets``: scheme, bucket, start, stop, ``field`` = the mean over
    documents of ``values[:, b]`` (``[D, B]``), its t-interval bounds and D."""
    rows = []
    for b in buckets:
        mean, low, high = t_interval(values[:, b])
        rows.append(
            {
                "scheme": scheme,
                "bucket": b,
                "start": b * width,
                "stop": (b + 1) * width,
                field: mean,
                "ci_low": low,
                "ci_high": high,
                "n_documents": int(np.isfinite(values[:, b]).sum()),
            }
        )
    return rows


def drift_rows(data: SchemeData) -> list[dict[str, Any]]:
    """Tidy rows: scheme, layer, drift and log-norm ratio with t intervals over documents."""
    if not data.drift:
        return []
    drift = np.stack([d for d, _ in data.drift])  # [D, L]
    norm = np.stack([g for _, g in data.drift])
    rows = []
    for layer in range(drift.shape[1]):
        m, lo, hi = t_interval(drift[:, layer])
        g, glo, ghi = t_interval(norm[:, layer])
        rows.append(
            {
                "scheme": data.scheme,
                "layer": layer,
                "drift": m,
                "drift_low": lo,
                "drift_high": hi,
                "log_norm_ratio": g,
                "log_norm_low": glo,
                "log_norm_high": ghi,
            }
        )
    return rows


def json_ready(obj: Any) -> Any:
    """``obj`` with every non-finite float (an interval of one document, a bucket no
    document reached) replaced by None, so it is strict JSON: null, never a bare NaN."""
    if isinstance(obj, float):
        return obj if math.isfinite(obj) else None
    if isinstance(obj, dict):
        return {k: json_ready(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [json_ready(v) for v in obj]
    return obj


def score_length(records: Sequence[dict[str, Any]], config: LengthConfig) -> dict[str, Any]:
    """Everything the report shows: curves, effective lengths, drift, per scheme (and the
    config, as ``length_scores.json`` records it). With the in-distribution window:
    :func:`posgen.results.scores.length_window.score_with_window`."""
    width, c = config.bucket_width, config.trained_context
    out: dict[str, Any] = {"curves": [], "effective": {}, "drift": [], "config": config.to_dict()}
    for scheme, data in gather(records).items():
        out["curves"].extend(curve_rows(data, width))
        out["effective"][scheme] = effective_length(
            data, width, c, config.max_length, config.threshold, config.seed
        )
        out["drift"].extend(drift_rows(data))
    return out
