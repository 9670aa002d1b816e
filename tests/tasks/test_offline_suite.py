"""The offline suite's data: deterministic, checksummed, shaped as documented (unit tier)."""

from __future__ import annotations

import hashlib
import json
import re

import pytest

from posgen.tasks import corpora, offline


def test_rebuilding_gives_byte_identical_files() -> None:
    recorded = offline.read_manifest()["sources"]
    current = corpora.source_fingerprints()
    if recorded != current:  # e.g. another Python version's pydoc topics
        changed = sorted(k for k in current if recorded.get(k) != current[k])
        pytest.skip(f"installed sources differ from the recorded ones: {changed}")
    for name, data in offline.build_files().items():
        assert (offline.DATA_DIR / name).read_bytes() == data, name


def test_manifest_checksums_match_and_are_checked(monkeypatch, tmp_path) -> None:
    manifest = offline.read_manifest()
    assert manifest["suite_version"] == offline.SUITE_VERSION
    for name, digest in manifest["files"].items():
        assert hashlib.sha256((offline.DATA_DIR / name).read_bytes()).hexdigest() == digest
    for name in manifest["files"]:
        (tmp_path / name).write_bytes((offline.DATA_DIR / name).read_bytes() + b"\n")
    (tmp_path / offline.MANIFEST).write_text(json.dumps(manifest))
    monkeypatch.setattr(offline, "DATA_DIR", tmp_path)
    with pytest.raises(RuntimeError, match="does not match its sha256"):
        offline.load_rows("posgen_cloze.jsonl")


def test_prose_documents() -> None:
    rows = offline.load_rows("posgen_prose.jsonl")
    assert len(rows) == sum(offline.PROSE_QUOTA.values()) == 12
    assert len({r["doc_id"] for r in rows}) == len(rows)
    assert {r["source"] for r in rows} == set(corpora.SOURCES)
    lo, hi = offline.PROSE_WORDS
    assert all(lo <= r["n_words"] == len(r["text"].split()) <= hi for r in rows)
    assert not any("### START" in r["text"] or re.search(r"\bp\.\d+:\d", r["text"]) for r in rows)


def test_cloze_items_follow_their_construction() -> None:
    rows = offline.load_rows("posgen_cloze.jsonl")
    prose = " ".join(r["text"] for r in offline.load_rows("posgen_prose.jsonl"))
    assert len(rows) == sum(offline.CLOZE_QUOTA.values()) == 64
    assert len({r["doc_id"] for r in rows}) == len(rows)
    for r in rows:
        words = r["context"].split()
        assert len(words) + 1 >= offline.CLOZE_WORDS
        assert re.fullmatch(r"[A-Za-z][a-z]{3,}", r["target"])
        assert r["target"] in {re.sub(r"\W+", "", w) for w in words}  # recoverable
        assert r["context"] + " " + r["target"] not in prose  # disjoint from posgen_prose


def test_loaders_give_lm_eval_datasets() -> None:
    ds = offline.cloze_dataset(version=1, anything="ignored")
    assert list(ds) == ["test"] and len(ds["test"]) == 64
    assert set(ds["test"].column_names) >= {"doc_id", "context", "target"}
    assert offline.SUITE_TASKS == ("posgen_prose", "posgen_cloze", "posgen_recall")
