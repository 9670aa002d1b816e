"""The sums a length run keeps of attention-output drift, and the per-layer drift they give.

See :mod:`posgen.harness.length.drift` for the distance (cosine to the in-context mean
direction, log-norm ratio) and how the sums are collected from the model's forward.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np


@dataclass
class DriftSums:
    """Sums for one document. Per bucket: ``cos_sum``, ``log_norm_sum`` ``[layers,
    buckets]``, ``count`` ``[buckets]``. Per region (0: reference R = [C/2, C), 1: past
    the trained context t ≥ C): ``region_cos``, ``region_log_norm`` ``[layers, 2]``,
    ``region_count`` ``[2]``."""

    cos_sum: np.ndarray
    log_norm_sum: np.ndarray
    count: np.ndarray
    region_cos: np.ndarray
    region_log_norm: np.ndarray
    region_count: np.ndarray
    reference: tuple[int, int]

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: getattr(self, k).tolist() for k in _ARRAYS}
        out["reference"] = list(self.reference)
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> DriftSums:
        arrays = {k: np.asarray(data[k], dtype=np.float64) for k in _ARRAYS}
        return cls(**arrays, reference=(int(data["reference"][0]), int(data["reference"][1])))

    def layer_drift(self) -> tuple[np.ndarray, np.ndarray]:
        """``drift_ℓ`` and ``log_norm_ratio_ℓ`` (``[layers]``; NaN without tokens ≥ C)."""
        with np.errstate(invalid="ignore", divide="ignore"):
            cos = self.region_cos / self.region_count
            log_norm = self.region_log_norm / self.region_count
        return cos[:, 0] - cos[:, 1], log_norm[:, 1] - log_norm[:, 0]


_ARRAYS = (
    "cos_sum",
    "log_norm_sum",
    "count",
    "region_cos",
    "region_log_norm",
    "region_count",
)
