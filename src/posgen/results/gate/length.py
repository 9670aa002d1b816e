"""The length kind in the CI gate: per-document NLL excess past C, per (model, scheme).

``posgen run --length`` writes ``RUN/length/<model>/`` (see
:mod:`posgen.harness.length.runner`): ``config.json`` and one bucket-sum record per
(scheme, document). For the gate, each document's value is its NLL excess past the
trained context C (:func:`posgen.results.scores.length.document_excess`): mean NLL over
the positions from C on minus its in-context reference, weighted by its tokens past C.
``posgen check`` pairs the candidate's documents with the baseline's per scheme and
tests whether the excess grew (one more cell per scheme in the Holm family of
:mod:`posgen.results.gate.check`).

The baseline's ``length`` section::

    {"settings": {max_length, trained_context, schemes, documents, bucket_width, seed,
                  positions},
     "cells": [{"scheme": S, "excess": Σ w e / Σ w, "docs": {"keys", "w", "g"}}, ...]}

(``g``: the per-document excess). The settings determine the values; a candidate with
other settings is refused (exit status 2), as is length in one run but not the other.

A length run with the in-distribution window pass (:mod:`posgen.harness.length.window`)
adds ``settings.window_stride`` and ``"window_cells"``: per scheme the per-document excess
over the window past C (:func:`posgen.results.scores.length_window.document_window_excess`),
in nats per token, gated like the cells above (row key ``("length_window", METRIC, KIND,
scheme, None)``, in the same Holm family). A baseline made before the window pass has
neither: its old cells are still gated and the run's window cells are not (there is
nothing to pair them with); a baseline with them and a run without is refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np

from posgen.results.folder.length_config import read_length_config
from posgen.results.folder.schema import SchemaError
from posgen.results.folder.store import slug
from posgen.results.gate.baseline_file import GateInputError, check_docs, check_typed
from posgen.results.gate.margins import LENGTH_METRIC
from posgen.results.scores.length import SchemeData, document_excess, gather, read_records
from posgen.results.scores.length_window import (
    document_window_excess,
    read_windows,
    window_arrays,
)

SETTINGS = (
    "max_length",
    "trained_context",
    "schemes",
    "documents",
    "bucket_width",
    "seed",
    "positions",
)
TASK, METRIC, KIND = "length", LENGTH_METRIC, "length"
WINDOW_TASK = "length_window"  # the excess over the in-distribution window


def length_section(run_root: Path, model: str) -> dict[str, Any] | None:
    """The ``length`` section of ``model``'s baseline (None: the run has no length folder
    for it). An incomplete or unusable length folder raises :class:`GateInputError`."""

    folder = Path(run_root) / "length" / slug(model)
    if not folder.is_dir():
        return None
    try:
        config = read_length_config(folder)
        records = read_records(folder, list(config.schemes), list(config.documents))
    except SchemaError as e:
        raise GateInputError(f"{folder}: unusable length run ({e!s:.200})") from None
    settings = {k: config.to_dict()[k] for k in SETTINGS}
    if len(settings["documents"]) < 2:
        raise GateInputError(
            f"{folder}: the length run has {len(settings['documents'])} document; the gate "
            "pairs documents and needs at least 2 (rerun with more length documents)"
        )
    by_scheme = gather(records)
    cells = [
        _cell(folder, scheme, *_excess(folder, config, data)) for scheme, data in by_scheme.items()
    ]
    section: dict[str, Any] = {"settings": settings, "cells": cells}
    if config.window_stride is not None:
        try:
            window = window_arrays(read_windows(folder, list(config.documents)))
        except SchemaError as e:
            raise GateInputError(f"{folder}: unusable length run ({e!s:.200})") from None
        section["settings"]["window_stride"] = config.window_stride
        section["window_cells"] = [
            _cell(folder, scheme, *_window_excess(folder, config, data, window))
            for scheme, data in by_scheme.items()
        ]
    return section


def _excess(
    folder: Path, config: Any, data: SchemeData
) -> tuple[SchemeData, np.ndarray, np.ndarray]:
    try:
        return (
            data,
            *document_excess(data.sums, data.counts, config.bucket_width, config.trained_context),
        )
    except ValueError as e:
        raise GateInputError(f"{folder}: {e}") from None


def _window_excess(folder: Path, config: Any, data: SchemeData, window: tuple) -> tuple:
    try:
        return (
            data,
            *document_window_excess(data, window, config.bucket_width, config.trained_context),
        )
    except ValueError as e:
        raise GateInputError(f"{folder}: {e}") from None


def _cell(
    folder: Path, scheme: str, data: SchemeData, excess: np.ndarray, weight: np.ndarray
) -> dict:
    """One scheme's gate cell: the token-weighted excess and its per-document values."""
    if not np.isfinite(excess).all():
        raise GateInputError(f"{folder}: {scheme}: a document's NLL is not finite")
    return {
        "scheme": scheme,
        "excess": float((weight * excess).sum() / weight.sum()),
        "docs": {
            "keys": list(data.documents),
            "w": [float(x) for x in weight],
            "g": [float(x) for x in excess],
        },
    }


def length_pairs(
    baseline: dict[str, Any] | None, current: dict[str, Any] | None
) -> list[tuple[tuple, dict[str, Any], dict[str, Any]]]:
    """(row key, baseline cell, candidate cell) per scheme, the key
    ``(TASK, METRIC, KIND, scheme, None)``; mismatched length input: GateInputError."""
    if baseline is None and current is None:
        return []
    if baseline is None:
        raise GateInputError(
            "length mismatch: the run has length cells (RUN/length/<model>/, schemes "
            f"{current['settings']['schemes']}) but the baseline has none (a run without "
            "--length, or a baseline_version 2 file); make a new baseline from a run with "
            "the same --length"
        )
    if current is None:
        raise GateInputError(
            "length mismatch: the baseline has length cells (schemes "
            f"{baseline['settings']['schemes']}) but the run has none; rerun with "
            "`posgen run --length` and the baseline's length settings"
        )
    b, c = baseline["settings"], current["settings"]
    diffs = [
        f"{k}: baseline {b.get(k)!r}, run {c.get(k)!r}" for k in SETTINGS if b.get(k) != c.get(k)
    ]
    if diffs:
        raise GateInputError(
            f"length settings mismatch ({'; '.join(diffs)}); rerun `posgen run --length` "
            "with the baseline's length settings or make a new baseline"
        )
    now = {cell["scheme"]: cell for cell in current["cells"]}
    base = {cell["scheme"]: cell for cell in baseline["cells"]}
    if set(now) != set(base):
        raise GateInputError(f"length schemes mismatch: baseline {sorted(base)}, run {sorted(now)}")
    # each cell states its gated scale, as the other kinds' cells do: the length metric
    pairs = [
        ((TASK, METRIC, KIND, s, None), {**base[s], "scale": METRIC}, {**now[s], "scale": METRIC})
        for s in b["schemes"]
    ]
    return pairs + _window_pairs(baseline, current)


def _window_pairs(baseline: dict[str, Any], current: dict[str, Any]) -> list[tuple]:
    """The window cells' pairs: none when the baseline predates the window pass."""
    if "window_cells" not in baseline:
        return []
    if "window_cells" not in current:
        raise GateInputError(
            "length mismatch: the baseline has cells of the excess over the in-distribution "
            "window but the run has none; rerun `posgen run --length` with this posgen"
        )
    b, c = baseline["settings"].get("window_stride"), current["settings"].get("window_stride")
    if b != c:
        raise GateInputError(
            f"length settings mismatch (window_stride: baseline {b!r}, run {c!r}); rerun "
            "with the baseline's window stride or make a new baseline"
        )
    now = {cell["scheme"]: cell for cell in current["window_cells"]}
    return [
        (
            (WINDOW_TASK, METRIC, KIND, cell["scheme"], None),
            {**cell, "scale": METRIC},
            {**now[cell["scheme"]], "scale": METRIC},
        )
        for cell in baseline["window_cells"]
    ]


def validate_section(section: Any, where: str) -> None:
    """Refuse a malformed ``length`` section of a baseline file (GateInputError)."""

    if section is None:
        return
    if not isinstance(section, dict):
        raise GateInputError(f"{where} is corrupt: 'length' should be an object or null")
    check_typed(section, {"settings": dict, "cells": list}, where)
    missing = [k for k in SETTINGS if k not in section["settings"]]
    if missing:
        raise GateInputError(f"{where}.settings is corrupt: missing {missing}")
    for name in ("cells", "window_cells") if "window_cells" in section else ("cells",):
        _validate_cells(section, name, where)


def _validate_cells(section: dict[str, Any], name: str, where: str) -> None:
    """``section[name]``: one well-formed cell per scheme of the settings, in order."""
    if not isinstance(section[name], list):
        raise GateInputError(f"{where} is corrupt: {name!r} should be a list")
    schemes = []
    for i, cell in enumerate(section[name]):
        at = f"{where}.{name}[{i}]"
        if not isinstance(cell, dict):
            raise GateInputError(f"{at} is not an object")
        check_typed(cell, {"scheme": str, "excess": float, "docs": dict}, at)
        check_docs(cell["docs"], f"{at}.docs")
        schemes.append(cell["scheme"])
    if schemes != list(section["settings"]["schemes"]):
        raise GateInputError(
            f"{where} is corrupt: its {name}' schemes {schemes} are not the settings' "
            f"{section['settings']['schemes']}"
        )
