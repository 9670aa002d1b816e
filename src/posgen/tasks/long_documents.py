"""Whole long documents of the offline corpus, for perplexity past a trained context.

The Britannica (1911) Shakespeare article (cleaned as in :mod:`posgen.tasks.corpora`, its
sentences joined by spaces) and four plays from Act II on (whole speeches, blank-line
separated): five texts of roughly 15k–40k words. They ship with posgen as package data
(the article is the decomposition's probe file; the plays are ``long_<play>.txt``), each
checked against its SHA-256 in the data manifest. Deterministic: same files, same texts.
"""

from __future__ import annotations

from posgen.tasks import corpora, offline

# Longest first, so that the first k documents are the k longest.
DOCUMENT_ORDER = ("hamlet", "eb1911-shakespeare", "julius_caesar", "macbeth", "tempest")


def long_documents() -> dict[str, str]:
    """``{document id: text}`` in :data:`DOCUMENT_ORDER`, from the shipped files."""
    paragraphs = offline.probe_britannica().rstrip("\n").split("\n\n")
    docs = {
        "eb1911-shakespeare": " ".join(s for p in paragraphs for s in corpora.split_sentences(p))
    }
    for play in corpora.PLAYS:
        docs[play] = offline.load_bytes(offline.long_play_file(play)).decode("utf-8")
    return {d: docs[d] for d in DOCUMENT_ORDER}
