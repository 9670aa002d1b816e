"""The excess over the in-distribution window, and the effective length it gives.

Inputs: each scheme's bucket sums (:mod:`posgen.results.scores.length`) and, per
document, the window pass's bucket sums over the same tokens past C
(:mod:`posgen.harness.length.window`: each token with C − S … C − 1 tokens before it at
positions 0 … C − 1). Content is equal, so the pairing cancels how hard the text is; what
is left is what the scheme's positions and context length do.

- **Excess** of scheme s, document d, bucket b (every bucket starting at or after C, where
  both cover the same tokens):

      e_db = sum_db / count_db − wsum_db / wcount_db      (nats / token; count_db = wcount_db)

  and its curve ``ē_b = mean_d e_db`` with the t interval ``ē_b ± t_{0.975, D−1} s_b / √D``
  over the D documents (the paired mean difference; no interval with D = 1). Every
  document has the same token count in a full bucket, so this is also the
  token-weighted log-t interval of ``docs/statistics-for-scores`` §1.
- **Effective length vs the window**: with τ = ln(1 + threshold), the start of the first
  bucket ≥ C whose ``ē_b > τ``; = max length and censored when none crosses; its interval
  is the percentile bootstrap over documents, as for the old figure.
- **Document excess** (what ``posgen check`` gates): ``Σ_{b ≥ b_C} (sum_db − wsum_db) /
  Σ_{b ≥ b_C} count_db``, weighted by its tokens past C.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from posgen.perturbations.seeding import item_rng
from posgen.results.folder.store import read_json, slug
from posgen.results.scores.length import (
    FEW_DOCS,
    N_BOOT,
    SchemeData,
    bucket_rows,
    crossing_summary,
    gather,
    past_context_start,
    score_length,
)


def window_path(folder: Path, document: str) -> Path:
    """Where ``posgen length`` writes a document's in-distribution window record."""
    return Path(folder) / "window" / f"{slug(document)}.json"


def read_windows(folder: Path, documents: list[str]) -> list[dict[str, Any]]:
    """Every document's window record, in order; a missing one raises."""
    return [read_json(window_path(folder, d), f"length window {d}") for d in documents]


def window_arrays(records: list[dict[str, Any]]) -> tuple[np.ndarray, np.ndarray]:
    """``(sums, counts)`` ``[D, B]`` of the window records."""
    sums = np.array([r["nll_sum"] for r in records], dtype=np.float64)
    return sums, np.array([r["count"] for r in records], dtype=np.float64)


def bucket_excess(
    data: SchemeData, window: tuple[np.ndarray, np.ndarray], width: int, c: int
) -> np.ndarray:
    """``e_db`` ``[D, B]``: NaN before ``b_C``; raises where the scheme and the window
    counted different tokens (a record of another run)."""
    w_sums, w_counts = window
    start = past_context_start(width, c)
    if w_sums.shape != data.sums.shape:
        raise ValueError(
            f"window records {w_sums.shape} do not match {data.scheme}'s {data.sums.shape}"
        )
    if not np.array_equal(w_counts[:, start:], data.counts[:, start:]):
        raise ValueError(f"{data.scheme}: the window pass did not score the same tokens past C")
    out = np.full(data.sums.shape, np.nan)
    with np.errstate(invalid="ignore", divide="ignore"):
        out[:, start:] = (
            data.sums[:, start:] / data.counts[:, start:] - w_sums[:, start:] / w_counts[:, start:]
        )
    return out


def excess_rows(data: SchemeData, excess: np.ndarray, width: int, c: int) -> list[dict[str, Any]]:
    """Tidy rows per bucket ≥ C: scheme, bucket, start, stop, mean excess, t bounds, D."""
    buckets = range(past_context_start(width, c), excess.shape[1])
    return bucket_rows(data.scheme, excess, width, "excess", buckets)


def first_crossing(excess: np.ndarray, tau: float, start: int) -> int | None:
    """First bucket ≥ ``start`` whose document-mean excess exceeds τ, or None."""
    with np.errstate(invalid="ignore"):
        curve = np.nanmean(excess[:, start:], axis=0)
    over = np.flatnonzero(curve > tau)
    return None if over.size == 0 else int(start + over[0])


def window_effective_length(
    scheme: str,
    excess: np.ndarray,
    width: int,
    c: int,
    max_length: int,
    threshold: float,
    seed: int,
) -> dict[str, Any]:
    """The effective length vs the window, its bootstrap interval (see the module doc)."""
    tau, start, d = math.log1p(threshold), past_context_start(width, c), excess.shape[0]

    def length_of(b: int | None) -> int:
        return max_length if b is None else int(b * width)

    first = first_crossing(excess, tau, start)
    rng = item_rng(seed, "length/window_effective_length/bootstrap", scheme)
    boot = np.array(
        [
            length_of(first_crossing(excess[rng.integers(0, d, d)], tau, start))
            for _ in range(N_BOOT)
        ]
    )
    return {
        **crossing_summary(length_of(first), first is None, boot),
        "threshold_nll": tau,
        "n_documents": d,
        "few_documents": d < FEW_DOCS,
    }


def document_window_excess(
    data: SchemeData, window: tuple[np.ndarray, np.ndarray], width: int, c: int
) -> tuple[np.ndarray, np.ndarray]:
    """Per document the excess over the window past C and its token weight ``[D]`` each."""
    bucket_excess(data, window, width, c)  # the same tokens, checked
    start = past_context_start(width, c)
    weight = data.counts[:, start:].sum(axis=1)
    if not (weight > 0).all():
        raise ValueError(f"{data.scheme}: a document has no tokens at or after C = {c}")
    diff = data.sums[:, start:].sum(axis=1) - window[0][:, start:].sum(axis=1)
    return diff / weight, weight


def window_scores(
    by_scheme: dict[str, SchemeData], window: tuple[np.ndarray, np.ndarray], config: Any
) -> dict[str, Any]:
    """``{"excess": rows, "effective_window": {scheme: ...}}`` for every scheme."""
    width, c = config.bucket_width, config.trained_context
    rows, effective = [], {}
    for scheme, data in by_scheme.items():
        excess = bucket_excess(data, window, width, c)
        rows += excess_rows(data, excess, width, c)
        effective[scheme] = window_effective_length(
            scheme, excess, width, c, config.max_length, config.threshold, config.seed
        )
    return {"excess": rows, "effective_window": effective, "window_stride": config.window_stride}


def score_with_window(
    records: list[dict[str, Any]], config: Any, windows: list[dict[str, Any]] | None
) -> dict[str, Any]:
    """:func:`~posgen.results.scores.length.score_length` and, with the documents' window
    records (None: a run made before the window pass), the keys ``excess``,
    ``effective_window`` and ``window_stride`` of :func:`window_scores`."""
    out = score_length(records, config)
    if windows:
        out.update(window_scores(gather(records), window_arrays(list(windows)), config))
    return out
