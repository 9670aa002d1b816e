"""The folder of posgen layers: a folder written before its typed config resumes, and a
rerun with other settings is refused naming them."""

from __future__ import annotations

import json
import shutil
from dataclasses import replace
from pathlib import Path

import pytest

from posgen.results.folder.layers_config import LayersConfig, LayersFolder
from posgen.results.folder.store import RunConflictError

DATA = Path(__file__).parents[2] / "results" / "folder" / "data"
LAYERS = ["layers_default.layers.json", "layers_heads.layers.json"]


def _stored(name: str) -> dict:
    return json.loads((DATA / name).read_text())


@pytest.mark.parametrize("name", LAYERS)
def test_a_layers_folder_from_before_reads_typed_and_resumes(name, tmp_path):
    stored = _stored(name)
    old = tmp_path / "old"
    old.mkdir()
    shutil.copy(DATA / name, old / "layers.json")
    folder = LayersFolder.open(old)
    assert isinstance(folder.config, LayersConfig)
    assert folder.config.to_dict() == stored["config"]
    assert LayersFolder.start(old, folder.config).config == folder.config  # resumes
    LayersFolder.start(tmp_path / "new", folder.config)
    assert json.loads((tmp_path / "new" / "layers.json").read_text()) == stored


def test_a_layers_rerun_with_other_settings_names_them(tmp_path):
    config = LayersConfig.from_dict(_stored(LAYERS[0])["config"])
    LayersFolder.start(tmp_path, config)
    with pytest.raises(RunConflictError, match=r"limit: 2 -> 3"):
        LayersFolder.start(tmp_path, replace(config, limit=3))
