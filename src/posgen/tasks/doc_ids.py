"""How a document is identified across cells and runs: the one rule for source ids.

A perturbed task adds :data:`DOC_ID` (``posgen_doc_id``) to every document it perturbs:
the document's source id, so that its perturbed and unperturbed results pair. The source
id of a document is the first of :data:`ID_KEYS` whose values are unique over the split,
else ``"<split>:<index>"``. Light: no lm-eval import (``posgen.results.tables.tidy`` uses it).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

DOC_ID = "posgen_doc_id"
ID_KEYS = ("doc_id", "id", "ind", "idx")


def source_ids(docs: Sequence[Mapping[str, Any]] | Any, split: str) -> list[str] | None:
    """The source id of each doc by the first of :data:`ID_KEYS` present in every doc with
    unique values; None when no key qualifies. ``docs``: a list of dicts or a
    ``datasets.Dataset`` (read column-wise)."""
    columnar = hasattr(docs, "column_names")
    if columnar:
        columns = set(docs.column_names)
    else:
        columns = set.intersection(*(set(d) for d in docs)) if len(docs) else set()
    for key in ID_KEYS:
        if key in columns:
            ids = [str(v) for v in (docs[key] if columnar else [d[key] for d in docs])]
            if len(set(ids)) == len(ids):
                return ids
    return None


def stable_ids(docs: Any, split: str) -> list[str]:
    """:func:`source_ids`, else ``"<split>:<index>"`` per doc."""
    return source_ids(docs, split) or [f"{split}:{i}" for i in range(len(docs))]
