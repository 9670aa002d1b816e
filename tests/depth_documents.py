"""Synthetic per-document depth cells with planted effects, as ``perdoc.parquet`` rows
(kind text | position, scheme depth, rate D), for the depth scores and report tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import pandas as pd

DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)


def u_shape(middle: float, depths: Sequence[float] = DEPTHS) -> dict[float, float]:
    """A curve 0 at the ends, ``middle`` at 0.5, quadratic between: its gap is ``middle``."""
    return {d: middle * (1 - (2 * d - 1) ** 2) for d in depths}


def nll_rows(
    shapes: Mapping[str, Mapping[float, float]],
    n: int = 24,
    noise: float = 0.3,
    seed: int = 0,
    model: str = "m",
    task: str = "posgen_kv",
) -> list[dict]:
    """Per form, document and depth: the gold value's log-likelihood ``-(b_d + shape(D)
    + e)`` (metric ``perplexity``, den 1), documents' difficulty ``b_d ~ N(5, 1)`` shared by
    both forms, noise ``e ~ N(0, noise)``."""
    rng = np.random.default_rng(seed)
    base = rng.normal(5, 1, n)
    rows = []
    for form, shape in shapes.items():
        for depth, effect in shape.items():
            nll = base + effect + rng.normal(0, noise, n)
            rows += [
                _row(model, task, form, depth, f"test:{d}", "perplexity", "perplexity", -v, False)
                for d, v in enumerate(nll)
            ]
    return rows


def acc_rows(
    probs: Mapping[str, Mapping[float, float]], n: int = 48, seed: int = 0, task: str = "kv_mc"
) -> list[dict]:
    """Per form, document and depth: 0/1 correctness with P(correct) = ``probs[form][D]``,
    drawn from one uniform per document (so documents that are right at a hard depth are
    right at an easier one: the depths are paired, as real documents are)."""
    rng = np.random.default_rng(seed)
    u = rng.uniform(size=n)
    rows = []
    for form, curve in probs.items():
        for depth, p in curve.items():
            rows += [
                _row("m", task, form, depth, f"test:{d}", "acc", "mean", float(x < p), True)
                for d, x in enumerate(u)
            ]
    return rows


def _row(model, task, form, depth, key, metric, aggregation, num, higher) -> dict:
    return {
        "model": model,
        "task": task,
        "kind": form,
        "scheme": "depth",
        "rate": float(depth),
        "seed": 0,
        "metric": metric,
        "filter": "none",
        "aggregation": aggregation,
        "higher_is_better": higher,
        "doc_key": key,
        "num": float(num),
        "den": 1.0,
    }


def perdoc(rows: list[dict]) -> pd.DataFrame:
    return pd.DataFrame(rows)
