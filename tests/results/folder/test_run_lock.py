"""One writer per run folder; a killed run's temporary files are cleaned (unit tier)."""

from __future__ import annotations

import os

import pytest

from posgen.results.folder.lock import LOCK_FILE, RunLock, RunLockedError


def test_a_second_writer_is_refused_naming_the_holder(tmp_path):
    root = tmp_path / "run"
    with RunLock(root) as first:
        assert first.created and (root / LOCK_FILE).is_file()
        with pytest.raises(RunLockedError, match=rf"another posgen run \(pid {os.getpid()}\)"):
            RunLock(root).__enter__()
    with RunLock(root) as again:  # released on exit
        assert not again.created


def test_stale_temporary_files_are_removed_on_the_next_start(tmp_path):
    (tmp_path / "cells" / "m").mkdir(parents=True)
    stale = [tmp_path / ".config.json.x1.tmp", tmp_path / "cells" / "m" / ".c.json.x2.tmp"]
    for p in stale:
        p.write_text("half")
    keep = tmp_path / "cells" / "m" / "c.json"
    keep.write_text("{}")
    with RunLock(tmp_path) as lock:
        assert sorted(lock.removed) == sorted(stale)
    assert not any(p.exists() for p in stale) and keep.is_file()


def test_a_stale_temporary_folder_is_removed_on_the_next_start(tmp_path):
    staged = tmp_path / "raw" / "m" / ".cell.x3.tmp"
    (staged / "model").mkdir(parents=True)
    (staged / "model" / "results_1.json").write_text("{}")
    keep = tmp_path / "raw" / "m" / "cell2" / "model" / "results_2.json"
    keep.parent.mkdir(parents=True)
    keep.write_text("{}")
    with RunLock(tmp_path) as lock:
        assert lock.removed == [staged]
    assert not staged.exists() and keep.is_file()
