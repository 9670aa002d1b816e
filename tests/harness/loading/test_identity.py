"""A local model folder's identity (posgen.harness.loading.identity): by its files' content,
blind to nothing a same-size rewrite changes, and read once (a cache keyed by the file's
stat, ctime included)."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import pytest

from posgen.harness.loading import identity, model_entries


@pytest.fixture(autouse=True)
def cache(tmp_path, monkeypatch) -> Path:
    """The digest cache in a folder of the test's own."""
    path = tmp_path / "cache" / identity.CACHE_FILE
    monkeypatch.setattr(identity, "cache_path", lambda: path)
    return path


def folder(root: Path, weights: bytes = b"\x01" * 4096) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "config.json").write_text(json.dumps({"model_type": "llama"}))
    (root / "model.safetensors").write_bytes(weights)
    (root / "tokenizer.json").write_text("{}")
    return root


def counting_reads(monkeypatch) -> list[str]:
    seen: list[str] = []
    read = identity.read_digest

    def counted(path, st, advance):
        seen.append(Path(path).name)
        return read(path, st, advance)

    monkeypatch.setattr(identity, "read_digest", counted)
    return seen


def test_same_size_other_weights_change_the_revision_but_not_the_legacy_one(tmp_path):
    model = folder(tmp_path / "m")
    before, legacy = identity.content_revision(model), identity.legacy_revision(model)
    (model / "model.safetensors").write_bytes(b"\x02" * 4096)  # same name, same size
    assert identity.content_revision(model) != before
    assert identity.legacy_revision(model) == legacy  # what earlier releases could not see
    assert before.startswith("local-content:") and len(before) == len("local-content:") + 16
    assert legacy.startswith("local:") and len(legacy) == len("local:") + 12


@pytest.mark.parametrize("name", ["tokenizer.json", "generation_config.json", "modeling_x.py"])
def test_a_changed_tokenizer_generation_config_or_code_changes_the_revision(tmp_path, name):
    model = folder(tmp_path / "m")
    before = identity.content_revision(model)
    (model / name).write_text("changed")
    assert identity.content_revision(model) != before


def test_files_outside_the_identity_do_not_count(tmp_path):
    model = folder(tmp_path / "m")
    before = identity.content_revision(model)
    (model / "README.md").write_text("notes")
    (model / "trainer_state.json").write_text("{}")
    assert identity.content_revision(model) == before


def test_an_unchanged_file_is_not_read_again(tmp_path, monkeypatch, cache):
    monkeypatch.setattr(identity, "RACY_SECONDS", 0.0)
    model = folder(tmp_path / "m")
    seen = counting_reads(monkeypatch)
    first = identity.content_revision(model)
    assert sorted(seen) == ["config.json", "model.safetensors", "tokenizer.json"]
    seen.clear()
    assert identity.content_revision(model) == first and seen == []  # every digest a hit
    stored = json.loads(cache.read_text())
    assert stored["form"] == identity.HASH_FORM
    assert os.path.realpath(model / "model.safetensors") in stored["files"]


def test_a_rewrite_with_its_mtime_put_back_is_seen_through_ctime(tmp_path, monkeypatch):
    monkeypatch.setattr(identity, "RACY_SECONDS", 0.0)
    model = folder(tmp_path / "m")
    weights = model / "model.safetensors"
    first = identity.content_revision(model)
    st = weights.stat()
    time.sleep(0.05)  # past the file system clock's tick
    with open(weights, "r+b") as f:  # in place: same inode, same size
        f.write(b"\x03" * 4096)
    os.utime(weights, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert weights.stat().st_mtime_ns == st.st_mtime_ns and weights.stat().st_ino == st.st_ino
    seen = counting_reads(monkeypatch)
    assert identity.content_revision(model) != first and seen == ["model.safetensors"]


def test_a_file_changed_just_now_is_not_cached(tmp_path, monkeypatch):
    """Within the file system clock's tick a rewrite could keep the ctime: not cached."""
    model = folder(tmp_path / "m")
    identity.content_revision(model)
    seen = counting_reads(monkeypatch)
    identity.content_revision(model)
    assert sorted(seen) == ["config.json", "model.safetensors", "tokenizer.json"]


@pytest.mark.parametrize("content", ["{not json", '{"form": "other", "files": {}}', "[]"])
def test_a_corrupt_cache_is_ignored_and_replaced(tmp_path, monkeypatch, cache, content):
    monkeypatch.setattr(identity, "RACY_SECONDS", 0.0)
    model = folder(tmp_path / "m")
    expected = identity.content_revision(model)
    cache.write_text(content)
    assert identity.content_revision(model) == expected
    assert json.loads(cache.read_text())["form"] == identity.HASH_FORM


def test_an_unwritable_cache_does_not_stop_anything(tmp_path, monkeypatch):
    """Nor an unreadable one: the digests are computed."""
    monkeypatch.setattr(identity, "RACY_SECONDS", 0.0)
    blocker = tmp_path / "blocker"
    blocker.write_text("a file where the cache folder would be")
    monkeypatch.setattr(identity, "cache_path", lambda: blocker / "cache" / "digests.json")
    model = folder(tmp_path / "m")
    assert identity.content_revision(model) == identity.content_revision(model)


def test_a_chunked_file_hashes_the_same_whatever_the_workers(tmp_path, monkeypatch):
    monkeypatch.setattr(identity, "CHUNK", 1000)  # 5 chunks, the last one short
    model = folder(tmp_path / "m", weights=os.urandom(4321))
    st = (model / "model.safetensors").stat()
    path = str(model / "model.safetensors")
    digests = set()
    for workers in (1, 3):
        monkeypatch.setattr(identity, "WORKERS", workers)
        digests.add(identity.read_digest(path, st, lambda n: None))
    assert len(digests) == 1


def test_the_entry_of_a_local_folder_carries_both_revisions(tiny_model_dir):
    path = tiny_model_dir("llama", 0)
    entry, twin = model_entries([str(path)], random_init=True, seed=3)
    assert entry.revision == identity.content_revision(path)
    assert entry.legacy_revision == identity.legacy_revision(path)
    assert twin.revision == f"{entry.revision}+random-init(seed=3)"
    assert twin.legacy_revision == f"{entry.legacy_revision}+random-init(seed=3)"
    assert "legacy_revision" not in entry.to_dict()
