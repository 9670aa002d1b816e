"""lm-eval's index of its own task folder, read from posgen's cache (posgen.tasks.index_cache)."""

from __future__ import annotations

import logging
import os
import pickle
from pathlib import Path

import pytest

from posgen.compat import internal
from posgen.tasks.index_cache import cached_index, cached_task_index, fingerprint, stored_path

TaskIndex = internal("lm_eval.tasks.manager:TaskIndex")


@pytest.fixture
def folder(tmp_path, monkeypatch):
    """A task folder: a task including an extensionless template, a group, a !function
    (its files' times set back a minute: a folder changed in the last two seconds is not
    stored)."""
    monkeypatch.setenv("POSGEN_CACHE", str(tmp_path / "cache"))
    root = tmp_path / "tasks"
    (root / "fam").mkdir(parents=True)
    (root / "fam" / "_template_yaml").write_text("dataset_path: one\noutput_type: loglikelihood\n")
    (root / "fam" / "a.yaml").write_text(
        "include: _template_yaml\ntask: fam_a\ntag: fam_tag\n"
        "doc_to_text: !function utils.doc_to_text\n"
    )
    (root / "fam" / "b.yaml").write_text("include: _template_yaml\ntask: fam_b\n")
    (root / "group.yaml").write_text("group: fam\ntask: [fam_a, fam_b]\n")
    _age(root)
    return root


def _age(root: Path, seconds: int = 60) -> None:
    for path in root.rglob("*"):
        st = path.stat()
        os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns - seconds * 1_000_000_000))


class Counted:
    """lm-eval's ``TaskIndex.build``, counting its calls."""

    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, paths, **kw):
        self.calls += 1
        return TaskIndex.build(paths, **kw)


def _as_tuples(index) -> dict:
    return {n: (e.kind, e.yaml_path, e.cfg, e.tags) for n, e in index.items()}


def test_the_index_is_built_once_then_read_equal_to_lm_evals(folder):
    build = Counted()
    first = cached_index(folder, build)
    again = cached_index(folder, build)
    assert build.calls == 1 and stored_path(fingerprint(folder)[0]).is_file()
    assert _as_tuples(again) == _as_tuples(first) == _as_tuples(TaskIndex.build([folder]))
    assert again["fam_a"].cfg["dataset_path"] == "one"  # the include resolved
    assert again["fam_a"].cfg["doc_to_text"].endswith("utils.doc_to_text")
    assert again["fam_tag"].tags == {"fam_a"}


@pytest.mark.parametrize(
    "change",
    ["edit an include without the yaml suffix", "add a task", "remove a task", "touch"],
)
def test_any_change_to_the_folder_indexes_it_again(folder, change):
    build = Counted()
    cached_index(folder, build)
    template = folder / "fam" / "_template_yaml"
    if change.startswith("edit"):
        template.write_text("dataset_path: two\noutput_type: loglikelihood\n")
    elif change == "add a task":
        (folder / "fam" / "c.yaml").write_text("include: _template_yaml\ntask: fam_c\n")
    elif change == "remove a task":
        (folder / "fam" / "b.yaml").unlink()
    else:
        stat = template.stat()
        os.utime(template, ns=(stat.st_atime_ns, stat.st_mtime_ns + 1_000_000))
    _age(folder, 10)
    index = cached_index(folder, build)
    assert build.calls == 2
    assert _as_tuples(index) == _as_tuples(TaskIndex.build([folder]))


def test_a_folder_changed_in_the_last_two_seconds_is_indexed_but_not_stored(folder):
    build = Counted()
    (folder / "fam" / "c.yaml").write_text("include: _template_yaml\ntask: fam_c\n")
    assert "fam_c" in cached_index(folder, build)
    assert not stored_path(fingerprint(folder)[0]).exists()
    _age(folder)
    cached_index(folder, build)
    assert stored_path(fingerprint(folder)[0]).exists() and build.calls == 2


def test_an_unreadable_cache_is_indexed_again_and_rewritten(folder):
    build = Counted()
    cached_index(folder, build)
    stored_path(fingerprint(folder)[0]).write_bytes(b"not a pickle")
    assert _as_tuples(cached_index(folder, build)) == _as_tuples(TaskIndex.build([folder]))
    assert build.calls == 2
    pickle.loads(stored_path(fingerprint(folder)[0]).read_bytes())  # rewritten whole


def test_a_cache_that_cannot_be_written_costs_only_the_index(folder, monkeypatch, tmp_path):
    blocker = tmp_path / "a-file"
    blocker.write_text("")
    monkeypatch.setenv("POSGEN_CACHE", str(blocker))  # a file: no folder can be made in it
    build = Counted()
    assert _as_tuples(cached_index(folder, build)) == _as_tuples(TaskIndex.build([folder]))
    cached_index(folder, build)
    assert build.calls == 2


def test_include_paths_are_indexed_every_time_and_override_as_lm_eval_merges(
    folder, tmp_path, caplog
):
    cls = cached_task_index(TaskIndex)
    cls.default_root = folder
    user = tmp_path / "mine"
    user.mkdir()
    (user / "b.yaml").write_text("task: fam_b\ndataset_path: mine\noutput_type: loglikelihood\n")
    (user / "d.yaml").write_text("task: mine_d\ndataset_path: mine\noutput_type: loglikelihood\n")
    cls.build([folder])  # stored
    with caplog.at_level(logging.WARNING, logger="lm_eval.tasks._index"):
        merged = cls.build([folder, user])
    assert _as_tuples(merged) == _as_tuples(TaskIndex.build([folder, user]))
    assert merged["fam_b"].cfg["dataset_path"] == "mine"
    assert "Task 'fam_b' from" in caplog.text and "overrides existing task" in caplog.text
    (user / "d.yaml").write_text("task: mine_d\ndataset_path: edited\noutput_type: loglikelihood\n")
    assert cls.build([folder, user])["mine_d"].cfg["dataset_path"] == "edited"


def test_other_folders_first_are_indexed_as_lm_eval_does(folder, tmp_path):
    cls = cached_task_index(TaskIndex)
    cls.default_root = tmp_path / "elsewhere"
    assert _as_tuples(cls.build([folder])) == _as_tuples(TaskIndex.build([folder]))
    assert not stored_path(fingerprint(folder)[0]).exists()


@pytest.mark.heavy
def test_posgens_task_manager_reads_lm_evals_own_folder_as_lm_eval_indexes_it(
    tmp_path, monkeypatch
):
    """The real folder (some 14,000 files): indexed once, then read back equal."""
    monkeypatch.setenv("POSGEN_CACHE", str(tmp_path))
    root = Path(__import__("lm_eval.tasks.manager").tasks.manager.__file__).parent
    assert cached_task_index(TaskIndex).default_root == root
    build = Counted()
    built = cached_index(root, build)
    read = cached_index(root, build)
    assert build.calls == 1 and len(read) > 10_000
    assert _as_tuples(read) == _as_tuples(built)

    from posgen.tasks.lm_eval_tasks import task_manager

    def indexed_again(paths, **kw):
        raise AssertionError(f"lm-eval's folder indexed again: {paths}")

    monkeypatch.setattr(TaskIndex, "build", staticmethod(indexed_again))
    tm = task_manager()  # reads the stored index
    assert {n: e.yaml_path for n, e in read.items()}.items() <= {
        n: e.yaml_path for n, e in tm.task_index.items()
    }.items()
