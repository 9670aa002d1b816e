"""How much a cell really perturbed: the realised amount per item and per cell.

A nominal rate is what was asked for; the realised amount is what happened. Each cell
record carries ``realised``: ``{"unit": ..., "items": [...]}`` with one entry per
perturbed item, where the unit is

- ``document`` for text cells: the order statistics of the document's content fields
  (``posgen_*`` keys that :mod:`posgen.tasks.perturbed_task` adds to every logged doc),
  indices in words;
- ``row`` for position and feature cells: one model input sequence (a request, a
  rolling window or a group of requests sharing a context), measured from the position
  values the model was run with, indices in tokens;
- ``""`` for the baseline and for cells that recorded nothing.

Position and feature cells also carry ``documents``: one item per logged document, from
the rows it was scored with (:func:`document_items`); ``perdoc.parquet`` takes its
realised columns from there (text cells: from ``items``).

Each item: ``key``, ``n`` (items that could move), ``fraction_moved`` (share selected to
move), ``mean_displacement`` (mean |new index − old index| over all n; for rope noise
the mean |p'[t] − p[t]|), ``dnd`` and ``idc`` (see
:class:`posgen.perturbations.order_stats.OrderStats`). qk noise moves no position: its
rows carry NaN displacement.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from posgen.results.folder.schema import SchemaError

STATS = ("fraction_moved", "mean_displacement", "dnd", "idc")
UNITS = ("", "document", "row")
EXAMPLE_DOCS = 2


def text_items(samples: Iterable[Mapping[str, Any]], keys: list[str]) -> list[dict[str, Any]]:
    """The realised order statistics of every logged document of a text cell.

    ``keys``: the pairing key of each sample (:func:`posgen.results.tables.tidy.doc_keys`).
    Raises ``KeyError`` naming the missing field when a doc lacks posgen's statistics.
    """
    items = []
    for key, sample in zip(keys, samples, strict=True):
        doc = sample.get("doc") or {}
        missing = [k for k in ("n", *STATS) if f"posgen_{k}" not in doc]
        if missing:
            raise KeyError(
                f"document {key}: the logged doc lacks posgen_{missing[0]}; a text cell "
                "must come from a posgen perturbed task"
            )
        items.append(
            {"key": key, "n": int(doc["posgen_n"]), **{k: float(doc[f"posgen_{k}"]) for k in STATS}}
        )
    return items


def document_items(
    rows: Iterable[Mapping[str, Any]], key_of: Mapping[tuple[str, int], str], task: str
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """Per-document realised amounts of a model-side cell from its row items.

    ``rows``: items of unit ``row``, each with ``docs`` (``[task name, lm-eval doc_id]``
    pairs, the documents the row served); ``key_of``: ``(task, doc_id)`` -> pairing key of
    every logged document of the cell's lm-eval task ``task``. Returns the rows with
    ``docs`` as sorted pairing keys, and one item per document: ``n`` = Σ_r n_r over its
    distinct rows r (a context shared by a document's answer choices is one row), each
    statistic the token-weighted mean Σ_r n_r·s_r / Σ_r n_r (for one row, the row's own;
    for several, e.g. rolling windows, dnd and idc are the token-weighted means of the
    windows' values, not the statistics of the concatenated order), and ``rows`` = the
    number of rows. A NaN row statistic (qk noise) makes the document's NaN.

    Raises SchemaError when a row names no document or one that was not logged, or when
    rows were recorded but a logged document has none.
    """
    out_rows, of_doc = _trace_rows(rows, key_of, task)
    if not out_rows:
        return out_rows, []
    missing = sorted(set(key_of.values()) - set(of_doc))
    if missing:
        raise SchemaError(
            f"{task!r}: documents {missing[:5]} were logged but no model row was recorded "
            "for them; their realised amount is unknown"
        )
    return out_rows, [_document_item(key, of_doc[key]) for key in sorted(of_doc)]


def _trace_rows(
    rows: Iterable[Mapping[str, Any]], key_of: Mapping[tuple[str, int], str], task: str
) -> tuple[list[dict[str, Any]], dict[str, list[Mapping[str, Any]]]]:
    """Each row with ``docs`` as sorted pairing keys, and each document's rows in row
    order; refuses a row that names no document or one that was not logged."""
    of_doc: dict[str, list[Mapping[str, Any]]] = {}
    out_rows = []
    for row in rows:
        keys = set()
        for doc_task, doc_id in row.get("docs") or []:
            key = key_of.get((doc_task, int(doc_id)))
            if key is None:
                raise SchemaError(
                    f"row {row['key'][:12]} served document {doc_id} of task {doc_task!r}, "
                    f"which is not among the logged documents of {task!r}"
                )
            keys.add(key)
        if not keys:
            raise SchemaError(
                f"row {row['key'][:12]} of {task!r} belongs to no document: the model "
                "could not trace it to a request (lm-eval changed its batching?)"
            )
        out_rows.append({**row, "docs": sorted(keys)})
        for key in keys:
            of_doc.setdefault(key, []).append(row)
    return out_rows, of_doc


def _document_item(key: str, rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    """One document's item from its rows: ``n`` = Σ_r n_r, each statistic the
    token-weighted mean Σ_r n_r·s_r / Σ_r n_r, ``rows`` = their number."""
    weights = [float(r["n"]) for r in rows]
    total = sum(weights)
    item: dict[str, Any] = {"key": key, "n": int(total), "rows": len(weights)}
    for k in STATS:
        values = [w * float(r[k]) for w, r in zip(weights, rows, strict=True)]
        item[k] = sum(values) / total if total else math.nan
    return item


def per_document(realised: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """A record's realised item of each document, by pairing key: a text cell's ``items``,
    a model-side cell's ``documents`` (empty where none were recorded)."""
    items = realised["items"] if realised["unit"] == "document" else realised.get("documents", [])
    return {i["key"]: i for i in items}


def summary(realised: Mapping[str, Any] | None) -> dict[str, Any]:
    """Cell-level realised columns of ``results.parquet`` from a record's ``realised``.

    ``realised_items``: items measured; ``realised_items_moved``: items in which anything
    moved (``idc > 0``); the four statistics are item means (NaN when unmeasured).
    """
    items = list((realised or {}).get("items", []))
    unit = str((realised or {}).get("unit", ""))
    if unit not in UNITS:
        raise ValueError(f"realised unit {unit!r} is not one of {UNITS}")
    out: dict[str, Any] = {
        "realised_unit": unit,
        "realised_items": len(items),
        "realised_items_moved": sum(1 for i in items if _finite(i["idc"]) and i["idc"] > 0),
    }
    for k in STATS:
        values = [float(i[k]) for i in items if _finite(i[k])]
        out[f"realised_{k}"] = sum(values) / len(values) if values else math.nan
    return out


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and math.isfinite(x)


def doc_examples(
    samples: Iterable[Mapping[str, Any]], keys: list[str], k: int = EXAMPLE_DOCS
) -> dict[str, dict[str, str]]:
    """The string fields (posgen's own excluded) of the ``k`` documents with the smallest
    keys: the same documents in every cell, so the report can pair them."""
    docs = {key: s.get("doc") or {} for key, s in zip(keys, samples, strict=True)}
    return {
        key: {
            f: v
            for f, v in sorted(docs[key].items())
            if isinstance(v, str) and not f.startswith("posgen_")
        }
        for key in sorted(docs)[:k]
    }


def generation_examples(
    by_filter: Mapping[str, list[Mapping[str, Any]]], keys: list[str], k: int = EXAMPLE_DOCS
) -> dict[str, dict[str, Any]]:
    """What a generative cell's model was asked and answered, for the ``k`` documents with
    the smallest keys: ``prompt`` (the context it generated from), ``generation`` (its raw
    text), ``target`` and ``filtered`` (the answer each filter extracted).

    ``by_filter``: the logged samples per filter (one per document each, in the order of
    ``keys``). Arguments are read as lm-eval holds them in memory (a list of
    ``(context, gen_kwargs)``) or as its samples file writes them (``gen_args_0.arg_0``)."""
    filters = list(by_filter)
    if not filters:
        return {}
    first = by_filter[filters[0]]
    order = sorted(range(len(keys)), key=lambda i: keys[i])[:k]
    out = {}
    for i in order:
        sample = first[i]
        out[keys[i]] = {
            "prompt": _context(sample.get("arguments")),
            "generation": _first_text(sample.get("resps")),
            "target": str(sample.get("target", "")),
            "filtered": {f: _first_text(by_filter[f][i].get("filtered_resps")) for f in filters},
        }
    return out


def _context(arguments: Any) -> str:
    if isinstance(arguments, Mapping):  # lm-eval's samples file: {"gen_args_0": {"arg_0": ...}}
        arguments = [list(a.values()) for a in arguments.values() if isinstance(a, Mapping)]
    try:
        return str(arguments[0][0])
    except (TypeError, IndexError, KeyError):
        return ""


def _first_text(value: Any) -> str:
    while isinstance(value, (list, tuple)) and value:
        value = value[0]
    return "" if isinstance(value, (list, tuple)) else str(value)


NOTHING_MOVED = "NOTHING MOVED"


def realised_text(row: Any) -> str:
    """The report's "realised" cell: the realised mean beside the nominal rate, and a
    flag where no item moved. ``row``: a ``results.parquet`` row (Series or namedtuple)."""
    unit = str(row["realised_unit"])
    items, moved = int(row["realised_items"]), int(row["realised_items_moved"])
    shift = float(row["realised_mean_displacement"])
    if not unit or items == 0:
        return "not recorded"
    noun = "docs" if unit == "document" else "rows"
    if not math.isfinite(shift):
        return f"no position displacement ({items} {noun})"
    if moved == 0:
        return f"{NOTHING_MOVED}: no {noun[:-1]} perturbed (0/{items})"
    fraction = float(row["realised_fraction_moved"])
    if fraction >= 0.999 and unit == "row":  # rope noise: every position jittered
        return f"mean |Δpos| {shift:.3g} ({moved}/{items} {noun} reordered)"
    return f"{fraction:.3g} moved, mean |Δpos| {shift:.3g} ({moved}/{items} {noun} moved)"
