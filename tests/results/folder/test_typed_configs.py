"""The typed configs of run, length, layers and cause folders read the settings files written
before they existed (tests/results/folder/data, kept verbatim) back to the same dicts,
hashes and default folders, and write them again unchanged."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from posgen.results.folder.cause_config import CauseConfig
from posgen.results.folder.config import RunConfig
from posgen.results.folder.layers_config import LayersConfig
from posgen.results.folder.length_config import (
    LengthConfig,
    LengthFolder,
    read_length_config,
)
from posgen.results.folder.run_store import RunStore
from posgen.results.folder.schema import config_hash
from posgen.results.folder.store import RunConflictError

DATA = Path(__file__).parent / "data"
RUNS = ["run_quick.config.json", "run_options.config.json"]
LENGTHS = ["length_plain.config.json", "length_decompose.config.json"]
LAYERS = ["layers_default.layers.json", "layers_heads.layers.json"]


def _stored(name: str) -> dict:
    return json.loads((DATA / name).read_text())


@pytest.mark.parametrize("name", RUNS)
def test_a_run_folder_from_before_reads_typed_and_rewrites_the_same_file(name, tmp_path):
    stored = _stored(name)
    old = tmp_path / "old"
    old.mkdir()
    shutil.copy(DATA / name, old / "config.json")
    store = RunStore.open(old)
    config = store.run_config
    assert isinstance(config, RunConfig)
    assert config.to_dict() == stored["config"]
    assert config_hash(config.to_dict()) == stored["config_hash"] == store.config_hash
    # written again from the typed object: the same file, so a rerun resumes
    assert RunStore.start(old, config).config_hash == stored["config_hash"]
    fresh = RunStore.start(tmp_path / "new", config)
    assert json.loads((fresh.root / "config.json").read_text()) == stored
    assert fresh.run_config == config


@pytest.mark.parametrize("name", LENGTHS)
def test_a_length_folder_from_before_reads_typed_with_its_hash_and_folder(name, tmp_path):
    stored = _stored(name)
    old = tmp_path / "old"
    old.mkdir()
    shutil.copy(DATA / name, old / "config.json")
    config = read_length_config(old)
    assert isinstance(config, LengthConfig) and config.model_entry is not None
    assert config.to_dict() == stored["config"]
    assert config_hash(config.to_dict()) == stored["config_sha256"]
    folders = json.loads((DATA / "default_folders.json").read_text())
    assert config.default_folder().name == folders[name]["default_folder"]
    assert config.earlier_default_folder().name == folders[name]["earlier_default_folder"]
    LengthFolder.start(old, config)  # the same config: resumes, nothing rewritten
    assert (old / "config.json").read_text() == (DATA / name).read_text()
    LengthFolder.start(tmp_path / "new", config)
    assert json.loads((tmp_path / "new" / "config.json").read_text()) == stored


def test_a_length_run_without_out_finds_the_folder_an_earlier_release_named(tmp_path, monkeypatch):
    """Its default folder is named by the config's hash, the model's revision in it: a
    folder named after the legacy revision is the one it resumes (with a note)."""
    from dataclasses import replace

    from posgen.harness.length.job import default_folder

    stored = LengthConfig.from_dict(_stored(LENGTHS[0])["config"])
    entry = stored.model_entry
    assert entry is not None and entry.revision.startswith("local:")
    now = replace(
        stored,
        model_entry=replace(
            entry, revision="local-content:0123456789abcdef", legacy_revision=entry.revision
        ),
    )
    monkeypatch.chdir(tmp_path)
    assert default_folder(now) == now.default_folder() != stored.default_folder()
    stored.default_folder().mkdir(parents=True)
    assert default_folder(now) == stored.default_folder()
    stored.earlier_default_folder().mkdir(parents=True)  # posgen-runs/length-<hash>
    assert default_folder(now) == stored.default_folder()
    now.earlier_default_folder().mkdir(parents=True)
    assert default_folder(now) == now.earlier_default_folder()
    now.default_folder().mkdir(parents=True)
    assert default_folder(now) == now.default_folder()
    assert now.default_folder().parent == Path("posgen-runs") / "length"


def test_a_length_rerun_with_other_settings_names_them(tmp_path):
    config = LengthConfig.from_dict(_stored(LENGTHS[0])["config"])
    LengthFolder.start(tmp_path, config)
    other = LengthConfig.from_dict({**config.to_dict(), "seed": 7, "threshold": 0.2})
    with pytest.raises(RunConflictError, match=r"seed: 1234 -> 7; threshold: 0\.1 -> 0\.2"):
        LengthFolder.start(tmp_path, other)


def test_a_length_config_without_a_model_entry_round_trips():
    """Folders written before entries were recorded (and planted test folders) hold {}."""
    d = {**_stored(LENGTHS[0])["config"], "model_entry": {}}
    config = LengthConfig.from_dict(d)
    assert config.model_entry is None and config.to_dict() == d


@pytest.mark.parametrize("name", LAYERS)
def test_a_layers_config_from_before_reads_typed_with_its_hash(name):
    stored = _stored(name)["config"]
    config = LayersConfig.from_dict(stored)
    assert config.to_dict() == stored and config_hash(config.to_dict()) == config_hash(stored)


def test_layers_cells_follow_the_settings():
    config = LayersConfig.from_dict(_stored(LAYERS[1])["config"])  # layer 1, 4 heads
    names = [c.name for c in config.cells()]
    assert names == ["plain", *(f"layer-001-head-{h:02d}" for h in range(4)), "all"]
    assert config.cells()[1].layers == (1,) and config.cells()[1].heads == (0,)
    plain = LayersConfig.from_dict(_stored(LAYERS[0])["config"])
    assert [c.name for c in plain.cells()] == ["plain", "layer-000", "layer-001", "all"]


CAUSES = ["cause_default.cause.json", "cause_twin_controls.cause.json"]


@pytest.mark.parametrize("name", CAUSES)
def test_a_cause_folder_from_before_reads_typed_and_resumes(name, tmp_path):
    """cause.json as written while posgen cause kept its settings as a dict: read typed to
    the same dict, and the folder accepts the typed config as its own (a rerun resumes)."""
    from posgen.results.folder.cause_config import CauseFolder

    stored = _stored(name)
    (tmp_path / "cause.json").write_text((DATA / name).read_text())
    folder = CauseFolder.open(tmp_path)
    assert isinstance(folder.config, CauseConfig)
    assert folder.config.to_dict() == stored["config"]
    assert CauseFolder.start(tmp_path, folder.config).config == folder.config
    assert json.loads((tmp_path / "cause.json").read_text()) == stored


def test_cause_cells_follow_the_settings():
    default = CauseConfig.from_dict(_stored(CAUSES[0])["config"])
    names = [c for c, _ in default.cells()]
    forms = ("additive", "distance", "key")
    assert names[:6] == ["plain", *(f"{f}-all" for f in (*forms, "foreign", "shuffled"))]
    assert len(names) == 6 + 30 * 3
    assert names[6:9] == [f"{f}-layer-000" for f in forms]
    assert default.cells()[6][1] == {"seed": 1234, "logits": "additive", "layers": (0,)}
    twin = CauseConfig.from_dict(_stored(CAUSES[1])["config"])  # --forms none
    assert twin.cells() == [
        ("plain", None),
        ("additive-all", {"seed": 7, "logits": "additive"}),
        ("shuffled-all", {"seed": 7, "logits": "shuffled"}),
    ]
