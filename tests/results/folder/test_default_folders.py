"""Every command's default folder is ``posgen-runs/<command>/<name>``; a rerun without
``--out`` finds the folder an earlier release named by default and resumes there."""

from __future__ import annotations

from pathlib import Path

import pytest

from posgen.results.folder.store import default_folder


@pytest.fixture(autouse=True)
def _in_tmp(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)


def test_the_default_folder_is_under_the_commands_name():
    assert default_folder("layers", "m-1234") == Path("posgen-runs/layers/m-1234")
    assert not Path("posgen-runs").exists()  # named, not made


@pytest.mark.parametrize(
    ("command", "earlier"),
    [
        ("run", "posgen-runs/embedded_offline"),
        ("layers", "posgen-layers/embedded-1234"),
        ("cause", "posgen-cause/embedded-1234"),
    ],
)
def test_an_earlier_releases_folder_is_found_until_the_new_one_exists(command, earlier):
    name = Path(earlier).name
    new = Path("posgen-runs") / command / name
    assert default_folder(command, name, Path(earlier)) == new
    Path(earlier).mkdir(parents=True)
    assert default_folder(command, name, Path(earlier)) == Path(earlier)
    new.mkdir(parents=True)
    assert default_folder(command, name, Path(earlier)) == new
