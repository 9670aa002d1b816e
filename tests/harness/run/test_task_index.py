"""The on-disk index of lm-eval task names behind the ``--suite`` check."""

from __future__ import annotations

import pytest

from posgen.harness.run import task_index


@pytest.fixture
def builds(tmp_path, monkeypatch):
    monkeypatch.setenv("POSGEN_CACHE", str(tmp_path))
    calls = []

    def build():
        calls.append(1)
        return ["hellaswag", "arc_easy"]

    return calls, build


def test_the_index_is_built_once_then_read_from_disk(builds):
    calls, build = builds
    assert task_index.known_task_names(build) == {"hellaswag", "arc_easy"}
    assert task_index.known_task_names(build) == {"hellaswag", "arc_easy"}
    assert len(calls) == 1


def test_another_release_or_task_folder_rebuilds_it(builds, monkeypatch):
    calls, build = builds
    task_index.known_task_names(build)
    monkeypatch.setattr(task_index, "index_key", lambda: "another")
    task_index.known_task_names(build)
    assert len(calls) == 2


def test_an_unreadable_index_is_rebuilt(builds, tmp_path):
    calls, build = builds
    task_index.known_task_names(build)
    (path,) = tmp_path.glob("lm_eval_tasks-*.json")
    path.write_text("{truncated")
    assert task_index.known_task_names(build) == {"hellaswag", "arc_easy"}
    assert len(calls) == 2


def test_the_key_follows_the_lm_eval_release(monkeypatch):
    key = task_index.index_key()
    monkeypatch.setattr(task_index.importlib.metadata, "version", lambda name: "9.9.9")
    assert task_index.index_key() != key


def test_the_key_follows_posgen_s_shipped_tasks(monkeypatch, tmp_path):
    assert any(task_index.POSGEN_YAML.glob("posgen_*.yaml"))
    monkeypatch.setattr(task_index, "POSGEN_YAML", tmp_path)
    (tmp_path / "posgen_prose.yaml").write_text("task: posgen_prose\n")
    key = task_index.index_key()
    (tmp_path / "posgen_new.yaml").write_text("task: posgen_new\n")
    assert task_index.index_key() != key
