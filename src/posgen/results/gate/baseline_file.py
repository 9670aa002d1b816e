"""The gate's baseline file: what it stores per document, and its validation.

A baseline (``posgen baseline``, ``baseline_version`` 5) holds, for one model and every
(task, primary metric, kind, scheme, rate) perturbed cell, the per-document degradation
``g_d`` (nats per word or byte for perplexities, the score drop for accuracy; averaged
over perturbation seeds when the run has several), its worst value over those seeds
``g_worst`` (equal to ``g`` with one seed) and its weight ``w_d`` (words or bytes; 1 for
accuracy), keyed by document. Its ``base`` section holds each task's unperturbed
per-document values (:mod:`posgen.results.gate.base`). ``posgen check`` pairs the
candidate's documents with these. Only each task's primary metric is stored (word
perplexity, else accuracy): byte perplexity would repeat the word-perplexity test on the
same documents. Its ``pairing`` section records what same-seed pairing rests on
(:mod:`posgen.results.gate.pairing`); its ``length`` section (null when the run has no
``posgen run --length`` folder for the model) holds the per-document NLL excess past C
per length scheme and the length settings (:mod:`posgen.results.gate.length`).

Older versions are refused with how to regenerate them: 2 and 3 lack the seed and
prompt settings of the baseline run (a check could not say whether its documents saw
the same perturbations), 4 lacks the unperturbed per-document values the gate tests.

Anything unreadable, partial or wrongly typed is refused with :class:`GateInputError`
(exit status 2) and the reason.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

BASELINE_KIND = "posgen-baseline"
BASELINE_VERSION = 5  # 5: the unperturbed per-document values (``base``)
OLD_VERSIONS = {  # refused, with what they lack
    2: "does not record the seed and prompt settings that pairing rests on",
    3: "does not record the seed and prompt settings that pairing rests on",
    4: "does not store the unperturbed per-document values the gate now tests",
}
KEY = ("task", "metric", "kind", "scheme", "rate")
TOP = {"kind": str, "model": str, "pairing": dict, "cells": list, "base": list}
CELL = {"task": str, "metric": str, "kind": str, "scheme": str, "rate": float}
CELL_NUM = ("degradation",)


class GateInputError(ValueError):
    """Invalid input to the gate (exit status 2)."""


def validate(data: Any, path: Path) -> dict[str, Any]:
    """The baseline ``data`` read from ``path``, or :class:`GateInputError` saying why."""
    if not isinstance(data, dict) or data.get("kind") != BASELINE_KIND:
        raise GateInputError(
            f"{path} is not a posgen baseline (write one with `posgen baseline RUN -o FILE`)"
        )
    version = data.get("baseline_version")
    if version in OLD_VERSIONS:
        raise GateInputError(
            f"{path} has baseline_version {version}, which {OLD_VERSIONS[version]}: "
            "regenerate it with `posgen baseline BASELINE_RUN -o FILE` from the run "
            "folder it was made from"
        )
    if version != BASELINE_VERSION:
        raise GateInputError(
            f"{path} has baseline_version {version!r}; this posgen reads "
            f"{BASELINE_VERSION}: regenerate it with `posgen baseline`"
        )
    check_typed(data, TOP, f"{path}")
    if "length" not in data:
        raise GateInputError(f"{path} is corrupt: missing key 'length' (null or an object)")
    if not data["cells"]:
        raise GateInputError(f"{path} is corrupt: 'cells' is empty")
    for i, cell in enumerate(data["cells"]):
        where = f"{path}: cells[{i}]"
        if not isinstance(cell, dict):
            raise GateInputError(f"{where} is not an object")
        check_typed(cell, CELL | dict.fromkeys(CELL_NUM, float) | {"docs": dict}, where)
        check_docs(cell["docs"], f"{where}.docs", ("g", "g_worst"))
    keys = [tuple(c[k] for k in KEY) for c in data["cells"]]
    if len(set(keys)) != len(keys):
        raise GateInputError(f"{path} is corrupt: a (task, metric, kind, scheme, rate) repeats")
    return data


def check_typed(obj: dict[str, Any], spec: dict[str, type], where: str) -> None:
    for key, kind in spec.items():
        if key not in obj:
            raise GateInputError(f"{where} is corrupt: missing key {key!r}")
        v = obj[key]
        if v is None:
            raise GateInputError(f"{where} is corrupt: {key!r} is null")
        ok = _is_number(v) if kind is float else isinstance(v, kind)
        if not ok:
            raise GateInputError(
                f"{where} is corrupt: {key!r} should be {kind.__name__}, got {v!r:.60}"
            )


def _is_number(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def check_docs(docs: dict[str, Any], where: str, fields: tuple[str, ...] = ("g",)) -> None:
    """Refuse malformed per-document lists: ``keys``, ``w`` and each of ``fields``."""
    names = ("keys", "w", *fields)
    lists = [docs.get(k) for k in names]
    if not all(isinstance(x, list) for x in lists):
        raise GateInputError(f"{where} is corrupt: needs lists {', '.join(map(repr, names))}")
    keys, w, *values = lists
    if len(keys) < 2 or any(len(x) != len(keys) for x in lists):
        raise GateInputError(f"{where} is corrupt: {', '.join(names)} need the same length >= 2")
    if not all(isinstance(k, str) for k in keys) or len(set(keys)) != len(keys):
        raise GateInputError(f"{where} is corrupt: document keys must be unique strings")
    if not all(_is_number(x) and x > 0 for x in w):
        raise GateInputError(f"{where} is corrupt: w must be numbers > 0")
    if not all(_is_number(x) for v in values for x in v):
        raise GateInputError(f"{where} is corrupt: {', '.join(fields)} must be numbers")
