"""Evidence-depth scores: the metric against depth D, paired over documents, and the
middle-versus-ends gap.

A depth cell (kind ``text`` or ``position``, scheme ``depth``, rate D; docs/depth.md)
scores every document of its task with the evidence at depth D. The documents are the
same at every depth and in both forms, so every comparison is paired: per document
``d = 1..n`` and depth D, ``m_d(D)`` is the document's value of the metric (the score
itself for ``acc``/``exact_match``, 0/1 per document; the NLL per unit, ``-ll/w``, nats,
for the perplexity rules; bits per byte for ``bits_per_byte``), in the metric's own
direction (``higher_is_better`` says which way is better).

Per (model, task, metric, form), over the depths run:

- the curve ``m(D) = mean_d m_d(D)`` with the interval of the mean (0/1: Wilson;
  continuous: t);
- each depth's difference from the ends, ``mean_d [m_d(D) - (m_d(0) + m_d(1)) / 2]``,
  with a paired interval (below): a fixed reference chosen before the data, not the best
  depth picked after it;
- the gap, ``gap = m(0.5) - (m(0) + m(1)) / 2``, the same at D = 0.5, from the
  per-document gaps ``g_d = m_d(.5) - (m_d(0) + m_d(1)) / 2``. Lost in the middle is a
  gap on the worse side: below 0 for accuracy, above 0 for an NLL.

Paired intervals of a mean difference ``mean_d (x_d - y_d)``
(:func:`paired_difference`): continuous metrics, the t interval of the per-document
differences (:func:`~posgen.results.stats.intervals.paired_t`); 0/1 metrics,
Agresti–Min on the paired table with fractional counts (x, y scaled into [0, 1]; the
ends' mean of a 0/1 document is 0, 1/2 or 1), whose per-document variance term is an
upper bound, so it errs wide. Simulated coverage at n = 12/24/48:
``benchmarks/sim_depth_gap.py``, pasted in docs/depth.md. The t interval of a 0/1
metric collapses to ``[0, 0]`` when no document moves; Agresti–Min does not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from posgen.results.folder.metrics import PER_DOCUMENT_RULES
from posgen.results.stats.intervals import agresti_min, paired_t, wilson

GROUP = ["model", "task", "metric", "filter", "form"]
DOC_COLUMNS = [*GROUP, "depth", "doc_key", "value", "binary", "higher_is_better"]
FORMS = ("text", "position")
DEPTH_SCHEME = "depth"  # the scheme of a depth cell, in either form
ENDS = (0.0, 1.0)
MIDDLE = 0.5


class DepthError(ValueError):
    """Depth cells that cannot be compared (documents that differ between depths)."""


def depth_documents(perdoc) -> Any:
    """The per-document values of every depth cell of a ``perdoc.parquet`` table (rows of
    kind ``text`` or ``position``, scheme ``depth``; the rate is D) -> a frame with
    :data:`DOC_COLUMNS` (``form`` is the kind). Empty when the run has no depth cells."""
    import pandas as pd

    rows = perdoc[(perdoc["scheme"] == DEPTH_SCHEME) & perdoc["kind"].isin(FORMS)]
    ratio = rows["num"].to_numpy(float) / rows["den"].to_numpy(float)
    rule = np.array([PER_DOCUMENT_RULES.get(a, "corpus") for a in rows["aggregation"]])
    # the per-document figure: the score; NLL per unit (nats); bits per byte
    scale = {"mean": 1.0, "perplexity": -1.0, "bits_per_byte": -1.0 / math.log(2)}
    value = ratio * np.array([scale.get(r, math.nan) for r in rule])
    log_rule = rule != "mean"
    out = pd.DataFrame(
        {
            "model": rows["model"].to_numpy(str),
            "task": rows["task"].to_numpy(str),
            "metric": rows["metric"].to_numpy(str),
            "filter": rows["filter"].to_numpy(str),
            "form": rows["kind"].to_numpy(str),
            "depth": rows["rate"].to_numpy(float),
            "doc_key": rows["doc_key"].to_numpy(str),
            "value": value,
            "binary": ~log_rule,
            "higher_is_better": rows["higher_is_better"].to_numpy(bool),
        },
        columns=DOC_COLUMNS,
    )
    for _, sub in out.groupby(GROUP[:4]):
        if sub["binary"].any() and not np.isin(sub["value"], (0.0, 1.0)).all():
            out.loc[sub.index, "binary"] = False  # a mean of non-0/1 scores: continuous
    return out


def by_depth(docs, where: str = "") -> dict[float, dict[str, float]]:
    """``{D: {doc_key: m_d(D)}}`` of one (model, task, metric, form)'s documents; refused
    when a depth scores other documents than the rest (the intervals pair them)."""
    out: dict[float, dict[str, float]] = {}
    for depth, key, value in zip(docs["depth"], docs["doc_key"], docs["value"], strict=True):
        out.setdefault(float(depth), {})[str(key)] = float(value)
    keys = {frozenset(v) for v in out.values()}
    if len(keys) > 1:
        raise DepthError(
            f"{where}: the depth cells score different documents; rerun the missing "
            "documents so every depth holds the same ones"
        )
    return dict(sorted(out.items()))


def paired_difference(
    x: Sequence[float], y: Sequence[float], binary: bool, span: float = 1.0
) -> dict[str, Any]:
    """``mean_d (x_d - y_d)`` over paired documents with its 95 % interval (module doc).

    ``binary``: x and y are sums of 0/1 scores in ``[0, span]``: Agresti–Min on
    ``x/span, y/span``, scaled back; else the paired t interval. Returns ``value``,
    ``ci_lo``, ``ci_hi``, ``n``, ``interval`` (its method's name)."""
    a, b = np.asarray(x, dtype=np.float64), np.asarray(y, dtype=np.float64)
    if binary:
        r = agresti_min(a / span, b / span)
        lo, hi = r["ci_lo"] * span, r["ci_hi"] * span
        return {"value": float((a - b).mean()), "ci_lo": lo, "ci_hi": hi, "n": a.size,
                "interval": "agresti-min"}  # fmt: skip
    r = paired_t(a - b)
    return {"value": r["degradation"], "ci_lo": r["ci_lo"], "ci_hi": r["ci_hi"], "n": a.size,
            "interval": "paired-t"}  # fmt: skip


def mean_interval(v: Sequence[float], binary: bool) -> dict[str, Any]:
    """The mean of one depth's per-document values with its 95 % interval: Wilson for
    0/1 values, t for continuous ones."""
    a = np.asarray(v, dtype=np.float64)
    if binary:
        lo, hi = wilson(float(a.sum()), a.size)
        return {"value": float(a.mean()), "ci_lo": lo, "ci_hi": hi, "interval": "wilson"}
    r = paired_t(a)
    return {"value": r["degradation"], "ci_lo": r["ci_lo"], "ci_hi": r["ci_hi"], "interval": "t"}


def _ends(table: dict[float, dict[str, float]], keys: list[str]) -> np.ndarray | None:
    if not all(e in table for e in ENDS):
        return None
    return np.array([table[0.0][k] + table[1.0][k] for k in keys]) / 2


def curve(docs, where: str = "") -> list[dict[str, Any]]:
    """One (model, task, metric, form)'s curve: per depth ``n``, the mean with its
    interval (``value``, ``ci_lo``, ``ci_hi``), and its paired difference from the ends'
    mean (``diff``, ``diff_lo``, ``diff_hi``; NaN when depth 0 or 1 was not run)."""
    table = by_depth(docs, where)
    binary = bool(docs["binary"].all())
    keys = sorted(next(iter(table.values())))
    ends = _ends(table, keys)
    rows = []
    for depth, values in table.items():
        v = np.array([values[k] for k in keys])
        row = {"depth": depth, "n": len(keys), **mean_interval(v, binary)}
        if ends is None:
            row.update(diff=math.nan, diff_lo=math.nan, diff_hi=math.nan)
        else:
            d = paired_difference(v, ends, binary)
            row.update(diff=d["value"], diff_lo=d["ci_lo"], diff_hi=d["ci_hi"])
        rows.append(row)
    return rows


def gap(docs, where: str = "") -> dict[str, Any] | None:
    """The middle-versus-ends gap ``m(0.5) - (m(0) + m(1)) / 2`` of one (model, task,
    metric, form), with its paired interval from the per-document gaps; None when depth
    0, 0.5 or 1 was not run."""
    table = by_depth(docs, where)
    keys = sorted(table.get(MIDDLE, {}))
    ends = _ends(table, keys)
    if not keys or ends is None:
        return None
    middle = np.array([table[MIDDLE][k] for k in keys])
    return paired_difference(middle, ends, bool(docs["binary"].all()))


def depth_scores(docs) -> dict[str, list[dict[str, Any]]]:
    """Every (model, task, metric, form)'s curve rows and gap, as plain records:
    ``{"curves": [...], "gaps": [...]}`` (each row carries its :data:`GROUP` keys,
    ``binary`` and ``higher_is_better``)."""
    curves, gaps = [], []
    for keys, sub in docs.groupby(GROUP, sort=True):
        ids = dict(zip(GROUP, keys, strict=True))
        extra = {"binary": bool(sub["binary"].all()),
                 "higher_is_better": bool(sub["higher_is_better"].iloc[0])}  # fmt: skip
        where = " / ".join(map(str, keys))
        curves += [{**ids, **extra, **row} for row in curve(sub, where)]
        g = gap(sub, where)
        if g is not None:
            gaps.append({**ids, **extra, **g})
    return {"curves": curves, "gaps": gaps}
