"""The realised position change of every row a model-side cell ran.

:class:`RowRecorder` is set as ``HFPosgenLM.plan_observer`` for a position or feature
cell: the model calls it with every padded batch and the :class:`BatchPlan` it built for
it, so what is measured is exactly what the rotary embedding was given, not a second
draw. Only the perturbed part of a row counts (the context of a log-likelihood request,
the whole window in rolling perplexity), once per distinct context. For that part, n
tokens with position values ``p`` (shape ``[n]``):

- ``fraction_moved`` = share of tokens with ``p[t] ≠ t``;
- ``mean_displacement`` = mean_t |p[t] − t| (for ``rope_noise:σ`` its expectation is
  ``σ·√(2/π)``, the mean of a half-normal);
- ``dnd``, ``idc``: order statistics of the order the positions put the tokens in
  (``argsort(p)``; see :mod:`posgen.perturbations.order_stats`).

A plan without position values (``qk_noise``) moves no position: its rows carry NaN.
Under a chat template only the context's content tokens are perturbed, and only they
count (n is their number; a displacement is in the row's positions).

A row planned from its passage blocks (``positions=depth:D``) also carries the
realised evidence depth beside the nominal one (``depth_*``:
:meth:`posgen.perturbations.depth.PositionDepth.realised`).

Each row also keeps the lm-eval documents it served (``docs``: ``[task name, doc_id]``
pairs, from the model's batch records), so the cell record can give every document its
own realised amount (:func:`posgen.results.tables.realised.document_items`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

import numpy as np

from posgen.perturbations.order_stats import order_stats

EXAMPLE_ROWS = 2
EXAMPLE_TOKENS = 80


class RowRecorder:
    """Collects one realised-statistics item per distinct row (keyed by its tokens)."""

    def __init__(self) -> None:
        self._items: dict[str, dict[str, Any]] = {}
        self._rows: dict[str, tuple[np.ndarray, np.ndarray | None]] = {}
        self._docs: dict[str, set[tuple[str | None, int]]] = {}

    def __call__(self, inps: Any, plan: Any, docs: Sequence[Iterable] | None = None) -> None:
        """Record the rows of one padded batch ``inps`` ``[B, T]`` run under ``plan``;
        ``docs[b]``: the ``(task name, doc_id)`` documents row b belongs to."""
        ids = inps.detach().to("cpu").numpy()
        table = None if plan.positions is None else plan.positions.detach().cpu().numpy()
        for b, n in enumerate(plan.spans):  # the perturbed tokens: a request's context
            row = ids[b, :n].astype(np.int64)
            key = plan.keys[b].hex()  # the same context (all choices of a document) counts once
            self._docs.setdefault(key, set()).update(() if docs is None else docs[b])
            if key in self._items:
                continue
            values = None if table is None else table[b, :n].astype(np.float64)
            at = plan.perturbed(b)
            self._items[key] = row_stats(
                key, None if values is None else values[at], at.size, at.astype(np.float64)
            )
            if plan.depth and plan.depth[b] is not None:
                self._items[key].update(plan.depth[b])
            self._rows[key] = (row, values)

    def state(self) -> tuple[dict, dict, dict]:
        """What :meth:`merge` takes: this recorder's items, rows and their documents
        (plain, picklable)."""
        return self._items, self._rows, self._docs

    def merge(self, states: list[tuple[dict, dict, dict]]) -> RowRecorder:
        """Add the items, rows and documents other recorders saw (the ranks of a
        data-parallel launch each see their share of the documents); a context seen twice
        counts once, with the documents of both."""
        for items, rows, docs in states:
            for key, item in items.items():
                self._items.setdefault(key, item)
                self._rows.setdefault(key, rows[key])
                self._docs.setdefault(key, set()).update(docs.get(key, ()))
        return self

    def realised(self) -> dict[str, Any]:
        """``{"unit": "row", "items": [...]}`` sorted by key (see posgen.results.tables.realised);
        each item's ``docs``: the ``[task name, doc_id]`` pairs the row served, sorted."""
        return {
            "unit": "row",
            "items": [
                {**self._items[k], "docs": _sorted_docs(self._docs.get(k, ()))}
                for k in sorted(self._items)
            ],
        }

    def examples(self, tokenizer: Any, k: int = EXAMPLE_ROWS) -> list[dict[str, Any]]:
        """The ``k`` rows with the smallest keys (the same rows at every rate): their
        first ``EXAMPLE_TOKENS`` tokens as text pieces, with the position each was given."""
        out = []
        for key in sorted(self._rows)[:k]:
            row, values = self._rows[key]
            row = row[:EXAMPLE_TOKENS]
            out.append(
                {
                    "key": key,
                    "n": int(self._items[key]["n"]),
                    "tokens": [tokenizer.decode([int(t)]) for t in row],
                    "positions": None if values is None else values[:EXAMPLE_TOKENS].tolist(),
                }
            )
        return out


def row_stats(
    key: str, values: np.ndarray | None, n: int, at: np.ndarray | None = None
) -> dict[str, Any]:
    """Realised statistics of n perturbed tokens given their position ``values``
    (``[n]``) and their unperturbed positions ``at`` (default ``0..n−1``)."""
    if values is None:
        return {"key": key, "n": n, **dict.fromkeys(_STATS, math.nan)}
    delta = values - (np.arange(n, dtype=np.float64) if at is None else at)
    moved = delta != 0
    order = order_stats(np.argsort(values, kind="stable"), int(moved.sum()))
    return {
        "key": key,
        "n": n,
        "fraction_moved": float(moved.mean()) if n else 0.0,
        "mean_displacement": float(np.abs(delta).mean()) if n else 0.0,
        "dnd": order.dnd,
        "idc": order.idc,
    }


def _sorted_docs(docs: Iterable[tuple[str | None, int]]) -> list[list]:
    return [[task, int(i)] for task, i in sorted(docs, key=lambda d: (str(d[0]), d[1]))]


_STATS = ("fraction_moved", "mean_displacement", "dnd", "idc")
