"""The versioned schema of a posgen run folder and its tidy tables.

Every file posgen writes into a run folder carries :data:`SCHEMA_VERSION` (a
``schema_version`` key in JSON files, a ``schema_version`` column in Parquet tables),
and readers refuse a version they do not know. Bump the version whenever a column is
renamed, removed or changes meaning; adding a column is backward compatible only if
readers need not know about it. docs/results-schema.md documents every column.

Kinds of cell: ``none`` (the unperturbed baseline, shared by every scheme), ``text``
(words reordered in the documents), ``position`` (position indices perturbed inside the
model), ``feature`` (RoPE features perturbed inside the model).
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Iterable, Mapping
from typing import Any

import numpy as np

# 2: realised amounts per cell and document (swap rates v2); 3: any lm-eval metric, each
# (metric, filter) its own row, described by its aggregation and direction
SCHEMA_VERSION = 3
CELL_KINDS = ("none", "text", "position", "feature")
PERTURBED_KINDS = ("text", "position", "feature")

# results.parquet: one row per (model, task, cell, metric)
RESULT_COLUMNS: dict[str, str] = {
    "schema_version": "int64",
    "model": "string",  # the label the user gave (``embedded``, a hub id, a path)
    "model_path": "string",  # what was loaded
    "model_revision": "string",  # hub revision, or local-content:<hex> of a local folder
    "dtype": "string",
    "random_init": "bool",  # the random-init twin of ``model``'s architecture
    "task": "string",  # the base task, e.g. posgen_prose
    "lm_eval_task": "string",  # the task lm-eval ran, e.g. perm_swap_5pct_posgen_prose
    "kind": "string",  # none | text | position | feature
    "scheme": "string",  # swap, rope_noise, ... ("none" for the baseline)
    "rate": "float64",  # the rate (text, position) or sigma (feature); 0 for the baseline
    "seed": "int64",  # perturbation seed
    "metric": "string",  # lm-eval metric name without the filter, e.g. word_perplexity
    "filter": "string",  # lm-eval's filter of its per-document values ("none" without one)
    "aggregation": "string",  # lm-eval's aggregation (mean, weighted_perplexity, bleu, ...)
    "higher_is_better": "bool",  # lm-eval's direction of the metric
    "value": "float64",
    "stderr": "float64",  # NaN when not available
    "n": "int64",  # documents scored
    "posgen_version": "string",
    "perturbation_spec": "string",  # canonical JSON of the PerturbationSpec ("" for none)
    "perturbation_version": "int64",  # 0 for the baseline
    # what the perturbation really did (posgen.results.tables.realised): unit "document" (text,
    # indices in words), "row" (position/feature, model input sequences, indices in
    # tokens) or "" (baseline, not recorded); item means, NaN where not measured
    "realised_unit": "string",
    "realised_items": "int64",  # items measured
    "realised_items_moved": "int64",  # items in which anything moved (0: nothing moved)
    "realised_fraction_moved": "float64",  # mean share of items moved (nominal: the rate)
    "realised_mean_displacement": "float64",  # mean |new index - old index| per word/token
    "realised_dnd": "float64",
    "realised_idc": "float64",
}

# perdoc.parquet: one row per (model, task, perturbed cell, metric, filter, document) of a
# metric scored per document, paired with the same document in the baseline cell.
# ``num``/``den`` are what lm-eval aggregates: (loglikelihood, words or bytes) for
# perplexities and bits per byte, (loglikelihood, 1) for ``perplexity``, (score, 1) for
# means. Corpus metrics (bleu, mcc, ...) have no per-document number and no rows here.
PERDOC_COLUMNS: dict[str, str] = {
    "schema_version": "int64",
    "model": "string",
    "task": "string",
    "kind": "string",
    "scheme": "string",
    "rate": "float64",
    "seed": "int64",
    "metric": "string",
    "filter": "string",
    "aggregation": "string",
    "higher_is_better": "bool",
    "doc_key": "string",
    "base_num": "float64",
    "base_den": "float64",
    "num": "float64",
    "den": "float64",
    # ±(base_num/base_den - num/den), signed so that > 0 is worse (the NLL rise for the log
    # rules; for means the move in the metric's worse direction, by higher_is_better)
    "delta": "float64",
    # the document's worst delta over the perturbation seeds of its cell (``--seeds K``;
    # equal to delta with one seed): HELM's worst case
    "delta_worst": "float64",
    "base_choice": "int64",  # acc: the choice predicted in the baseline cell; -1 otherwise
    "choice": "int64",  # acc: the choice predicted in this cell; -1 otherwise
    # the document's realised order change: text cells in words; position/feature cells
    # in tokens, the token-weighted mean over the document's distinct model rows
    "realised_n": "float64",  # words that could move / perturbed tokens of its rows
    "realised_fraction_moved": "float64",
    "realised_mean_displacement": "float64",  # in words / token positions
    "realised_dnd": "float64",
    "realised_idc": "float64",
}

# length_effective.parquet: one row per (model, length scheme) of ``posgen run --length``
# (RUN/length/<model>/); a run without --length has no such table.
LENGTH_EFFECTIVE_COLUMNS: dict[str, str] = {
    "schema_version": "int64",
    "model": "string",  # the sweep's model label (the length folder's name)
    "scheme": "string",  # none, lambda:G,W, scale:F, dynamic:F, yarn:F
    "trained_context": "int64",  # C
    "max_length": "int64",
    "n_documents": "int64",
    "effective_length": "int64",  # tokens; max_length when censored
    "censored": "bool",  # no bucket crossed the threshold: the length is >= max_length
    "ci_low": "float64",  # 95% percentile-bootstrap interval over documents
    "ci_high": "float64",
    "reference_nll": "float64",  # mean NLL over [C/2, C)
    "threshold_nll": "float64",  # reference + ln(1 + threshold)
}

# length_excess.parquet: one row per (model, length scheme, bucket at or after C) of a
# length run with the in-distribution window pass (absent for runs made before it)
LENGTH_EXCESS_COLUMNS: dict[str, str] = {
    "schema_version": "int64",
    "model": "string",
    "scheme": "string",
    "window_stride": "int64",  # S: every token past C scored with C − S … C − 1 before it
    "bucket": "int64",
    "start": "int64",
    "stop": "int64",
    "excess": "float64",  # mean over documents of NLL(scheme) − NLL(window), nats/token
    "ci_low": "float64",  # t interval over documents (NaN with one document)
    "ci_high": "float64",
    "n_documents": "int64",
    # the scheme's effective length vs the window (repeated on its rows)
    "window_effective_length": "int64",  # tokens; max_length when censored
    "window_censored": "bool",
    "window_effective_low": "float64",  # 95% percentile-bootstrap interval over documents
    "window_effective_high": "float64",
}

# length_curves.parquet: one row per (model, length scheme, position bucket)
LENGTH_CURVE_COLUMNS: dict[str, str] = {
    "schema_version": "int64",
    "model": "string",
    "scheme": "string",
    "bucket": "int64",
    "start": "int64",  # first token position of the bucket
    "stop": "int64",  # one past the last
    "nll": "float64",  # mean over documents of the document's mean NLL in the bucket
    "ci_low": "float64",  # t interval over documents (NaN with one document)
    "ci_high": "float64",
    "n_documents": "int64",
}


class SchemaError(ValueError):
    """A file does not match the schema this posgen reads; the message says why."""


def canonical_json(obj: Any) -> str:
    """Canonical JSON: sorted keys, no whitespace, non-finite floats refused."""
    return json.dumps(
        obj, sort_keys=True, separators=(",", ":"), allow_nan=False, default=_json_default
    )


def config_hash(config: Mapping[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of a resolved run config."""
    return hashlib.sha256(canonical_json(dict(config)).encode("utf-8")).hexdigest()


def _json_default(obj: Any) -> Any:
    if isinstance(obj, np.integer):
        return int(obj)
    if isinstance(obj, np.floating):
        return float(obj)
    if isinstance(obj, (set, frozenset)):
        return sorted(obj)
    raise TypeError(f"not JSON-serialisable: {type(obj).__name__}")


def check_version(found: Any, where: str) -> None:
    """Refuse a file written with another schema version (an older one: say how to get
    its results again with this posgen)."""
    if found == SCHEMA_VERSION:
        return
    if isinstance(found, int) and found < SCHEMA_VERSION:
        raise SchemaError(
            f"{where} was written by an earlier posgen (schema_version {found}; this posgen "
            f"reads {SCHEMA_VERSION}, which scores every lm-eval metric per filter); rerun "
            "`posgen run` into a new folder, or rebuild its scores from the lm-eval output "
            "it holds with `posgen ingest RUN/raw --out NEW`"
        )
    raise SchemaError(
        f"{where} has schema_version {found!r}, but this posgen reads version "
        f"{SCHEMA_VERSION}; regenerate it with this posgen version (posgen run)"
    )


def rate_label(rate: float) -> str:
    """A stable, file-name-safe label of a rate or sigma: 0.05 -> '0.05', 1.0 -> '1'."""
    if not math.isfinite(rate):
        raise ValueError(f"rate must be finite, got {rate!r}")
    return f"{rate:.6g}"


def frame(rows: Iterable[Mapping[str, Any]], columns: Mapping[str, str]):
    """A pandas DataFrame with exactly ``columns`` in their declared dtypes.

    Missing keys raise :class:`SchemaError`; extra keys are refused too, so a typo
    cannot silently add a column.
    """
    import pandas as pd

    rows = [dict(r, schema_version=SCHEMA_VERSION) for r in rows]
    for i, row in enumerate(rows):
        missing = sorted(set(columns) - set(row))
        extra = sorted(set(row) - set(columns))
        if missing or extra:
            raise SchemaError(f"row {i}: missing columns {missing}, unknown columns {extra}")
    df = pd.DataFrame(rows, columns=list(columns))
    return df.astype(dict(columns))


def validate_frame(df, columns: Mapping[str, str], where: str) -> None:
    """Check a loaded table has the schema's columns and version."""
    missing = sorted(set(columns) - set(df.columns))
    if missing:
        raise SchemaError(f"{where} lacks columns {missing}; was it written by posgen?")
    versions = set(df["schema_version"].unique().tolist()) if len(df) else {SCHEMA_VERSION}
    for v in versions:
        check_version(v, where)
