"""The documents of ``posgen length``: the built-in long texts, or the user's own.

Every document is a :class:`Document` (an id, where it came from, its text); its content
hash is recorded in the run folder so that a rerun or a gate check on other documents is
refused. :func:`select` tokenizes documents in source order and keeps the first ``n`` that
reach ``max_length`` tokens: shorter ones are skipped and counted, never padded.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any


class DocumentError(ValueError):
    """Documents that cannot be read or do not suffice; the message says what to do."""


@dataclass(frozen=True)
class Document:
    """One document: ``doc_id`` (unique in a run), ``source`` (where it was read) and text."""

    doc_id: str
    source: str
    text: str = field(repr=False)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    def describe(self) -> dict[str, str]:
        """What the run folder records of the document."""
        return {"source": self.source, "sha256": self.sha256}


def builtin_documents() -> Iterator[Document]:
    """The five long texts shipped with posgen (:mod:`posgen.tasks.long_documents`)."""
    from posgen.tasks.long_documents import long_documents

    for doc_id, text in long_documents().items():
        yield Document(doc_id, f"posgen:{doc_id}", text)


@dataclass
class Selection:
    """The kept documents with their token ids (cut to ``max_length``), and how many
    shorter ones were skipped."""

    documents: list[Document]
    token_ids: dict[str, list[int]]
    skipped: int = 0
    shortest: dict[str, int] = field(default_factory=dict)  # a few skipped: id -> tokens


def select(
    documents: Iterable[Document],
    tokenize: Callable[[str], list[int]],
    max_length: int,
    n: int | None,
) -> Selection:
    """The first ``n`` documents (all when None) of at least ``max_length`` tokens, each
    cut to its first ``max_length`` tokens; shorter ones are skipped and counted."""
    out = Selection([], {})
    seen: set[str] = set()
    for doc in documents:
        if doc.doc_id in seen:
            raise DocumentError(f"two documents are named {doc.doc_id!r}")
        seen.add(doc.doc_id)
        ids = tokenize(doc.text)
        if len(ids) < max_length:
            out.skipped += 1
            if len(out.shortest) < 3:
                out.shortest[doc.doc_id] = len(ids)
            continue
        out.documents.append(doc)
        out.token_ids[doc.doc_id] = list(ids[:max_length])
        if n is not None and len(out.documents) == n:
            break
    return out


def describe_shortfall(sel: Selection, wanted: int | None, max_length: int) -> str | None:
    """Why the selection does not suffice (None when it does)."""
    have = len(sel.documents)
    if have and (wanted is None or have >= wanted):
        return None
    examples = ", ".join(f"{k}: {v}" for k, v in sel.shortest.items())
    need = f"{wanted} document(s)" if wanted else "a document"
    return (
        f"need {need} of at least --max-length {max_length} tokens, found {have} "
        f"({sel.skipped} shorter skipped{f', e.g. {examples}' if examples else ''}); "
        "lower --max-length or --documents, or give longer documents"
    )


def records(docs: list[Document]) -> dict[str, Any]:
    """``{doc_id: {source, sha256}}`` in run order."""
    return {d.doc_id: d.describe() for d in docs}
