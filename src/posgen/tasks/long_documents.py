"""Whole long documents of the offline corpus, for perplexity past a trained context.

The Britannica (1911) Shakespeare article (cleaned as in :mod:`posgen.tasks.corpora`)
and the four plays from Act II on (whole speeches, blank-line separated): five texts of
roughly 15k–40k words, installed offline. Deterministic: same sources, same texts.
"""

from __future__ import annotations

from posgen.tasks import corpora

# Longest first, so that the first k documents are the k longest.
DOCUMENT_ORDER = ("hamlet", "eb1911-shakespeare", "julius_caesar", "macbeth", "tempest")


def long_documents() -> dict[str, str]:
    """``{document id: text}`` in :data:`DOCUMENT_ORDER`."""
    docs: dict[str, list[str]] = {}
    separators: dict[str, str] = {}
    for origin, sentences in corpora.sentence_streams("britannica"):
        docs[origin] = list(sentences)
        separators[origin] = " "
    for chunk in corpora.play_chunks(1):
        docs.setdefault(chunk.origin, []).extend(chunk.sentences)
        separators[chunk.origin] = chunk.separator
    order = [d for d in DOCUMENT_ORDER if d in docs] + sorted(set(docs) - set(DOCUMENT_ORDER))
    return {d: separators[d].join(docs[d]) for d in order}
