"""The one folder protocol, on the folder of every command that writes one (run and
ingest, length, decompose, layers, cause): an interrupted run keeps what finished and a
rerun resumes there; other settings are refused and nothing is overwritten; a second
writer is refused at once; a run that fails before any cell finished leaves no folder; a
foreign folder or an unwritable ``--out`` is refused before anything is put into it."""

from __future__ import annotations

import json
import multiprocessing
import re
from dataclasses import replace
from pathlib import Path

import pytest

from posgen.results.folder.cause_config import CauseConfig, CauseFolder
from posgen.results.folder.config import ModelEntry, RunConfig
from posgen.results.folder.decompose_config import DecomposeConfig, DecomposeFolder
from posgen.results.folder.layers_config import LayersConfig, LayersFolder
from posgen.results.folder.length_config import LengthConfig, LengthFolder
from posgen.results.folder.lock import LOCK_FILE, RunLockedError
from posgen.results.folder.protocol import CommandFolder, OutFolderError
from posgen.results.folder.run_store import RunStore
from posgen.results.folder.store import RunConflictError

DATA = Path(__file__).parent / "data"
ENTRY = ModelEntry(label="tiny", path="/models/tiny", embedded=False, revision=None)


def _stored(name: str) -> dict:
    return json.loads((DATA / name).read_text())["config"]


def _write_one(folder) -> Path:
    """One finished cell, as each command writes it."""
    if isinstance(folder, RunStore):
        return folder.write_cell("tiny", "prose__none", {"cell": {}})
    if isinstance(folder, DecomposeFolder):
        import pandas as pd

        folder.write_table("trained", pd.DataFrame({"r_3axis": [0.5]}))
        return folder.cell_path("trained")
    if isinstance(folder, LengthFolder):
        path = folder.root / "docs" / "none" / "doc-0.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("{}")
        return path
    folder.write_cell("plain", {"loglikelihood": [-1.0]})
    return folder.cell_path("plain")


def _has_one(folder) -> bool:
    if isinstance(folder, RunStore):
        return folder.has_cell("tiny", "prose__none")
    if isinstance(folder, DecomposeFolder):
        return folder.has_cell("trained")
    if isinstance(folder, LengthFolder):
        return folder.has_results()
    return folder.has_cell("plain")


def _typed(folder):
    """The folder's settings, typed (a run folder keeps the dict it hashes beside them)."""
    return folder.run_config if isinstance(folder, RunStore) else folder.config


def _configs():
    """Per command: its folder class, a config and another config (one setting changed)."""
    run = RunConfig.from_dict(_stored("run_quick.config.json"))
    length = LengthConfig.from_dict(_stored("length_plain.config.json"))
    layers = LayersConfig.from_dict(_stored("layers_default.layers.json"))
    cause = CauseConfig.from_dict(_stored("cause_default.cause.json"))
    decompose = DecomposeConfig(ENTRY, random_init=True, docs=1, tokens=24, seed=0)
    return {
        "run": (RunStore, run, replace(run, seed=run.seed + 1)),
        "length": (LengthFolder, length, replace(length, seed=length.seed + 1)),
        "decompose": (DecomposeFolder, decompose, replace(decompose, tokens=32)),
        "layers": (LayersFolder, layers, replace(layers, seed=layers.seed + 1)),
        "cause": (CauseFolder, cause, replace(cause, seed=cause.seed + 1)),
    }


CASES = _configs()


@pytest.mark.parametrize("command", CASES)
def test_an_interrupted_run_resumes_and_other_settings_are_refused(command, tmp_path):
    cls, config, other = CASES[command]
    out = tmp_path / "out"
    with pytest.raises(KeyboardInterrupt), cls.create(out, config) as folder:
        finished = _write_one(folder)
        raise KeyboardInterrupt  # killed after its first cell
    stamp = finished.stat().st_mtime_ns
    with cls.create(out, config) as folder:  # the same settings: resumes there
        assert _has_one(folder) and _typed(folder) == config
    assert finished.stat().st_mtime_ns == stamp
    settings = (out / cls.settings).read_bytes()
    with (
        pytest.raises(RunConflictError, match=r"other settings|different config|another config"),
        cls.create(out, other),
    ):
        pass
    assert (out / cls.settings).read_bytes() == settings and finished.is_file()


def _hold(out: str, cls_name: str, started, release) -> None:
    cls, config, _ = CASES[cls_name]
    with cls.create(out, config):
        started.set()
        release.wait(30)


@pytest.mark.parametrize("command", CASES)
def test_a_second_writer_is_refused_at_once(command, tmp_path):
    cls, config, _ = CASES[command]
    out = tmp_path / "out"
    ctx = multiprocessing.get_context("fork")
    started, release = ctx.Event(), ctx.Event()
    holder = ctx.Process(target=_hold, args=(str(out), command, started, release))
    holder.start()
    try:
        assert started.wait(30)
        with (
            pytest.raises(RunLockedError, match="being written by another posgen run"),
            cls.create(out, config),
        ):
            pass
    finally:
        release.set()
        holder.join(30)
    assert holder.exitcode == 0


@pytest.mark.parametrize("command", CASES)
def test_a_first_run_that_finishes_nothing_leaves_no_folder(command, tmp_path):
    cls, config, _ = CASES[command]
    out = tmp_path / "new" / "out"
    with pytest.raises(RuntimeError, match="model failed to load"), cls.create(out, config):
        raise RuntimeError("model failed to load")
    assert not out.exists()


@pytest.mark.parametrize("command", CASES)
def test_a_foreign_folder_is_refused_before_anything_goes_in(command, tmp_path):
    cls, config, _ = CASES[command]
    (tmp_path / "notes.txt").write_text("mine")
    with (
        pytest.raises(RunConflictError, match="not empty and is not a posgen"),
        cls.create(tmp_path, config),
    ):
        pass
    assert sorted(p.name for p in tmp_path.iterdir()) == ["notes.txt"]
    assert not (tmp_path / LOCK_FILE).exists()


@pytest.mark.parametrize("command", CASES)
def test_an_out_that_is_a_file_is_refused(command, tmp_path):
    cls, config, _ = CASES[command]
    (tmp_path / "f").write_text("x")
    for out in (tmp_path / "f", tmp_path / "f" / "below"):
        with pytest.raises(OutFolderError, match="choose another --out"), cls.create(out, config):
            pass


def test_an_earlier_decompose_output_without_settings_is_refused(tmp_path):
    """posgen decompose kept no settings before the protocol: its folder cannot resume."""
    (tmp_path / "heads.parquet").write_bytes(b"PAR1")
    with (
        pytest.raises(RunConflictError, match="earlier posgen decompose"),
        DecomposeFolder.create(tmp_path, CASES["decompose"][1]),
    ):
        pass


def test_every_command_folder_follows_the_protocol():
    """Every folder class is a CommandFolder, so every command gets the same create."""
    assert all(issubclass(cls, CommandFolder) for cls, _, _ in CASES.values())
    settings = [cls.settings for cls, _, _ in CASES.values()]
    kinds = {cls.command for cls, _, _ in CASES.values()}
    assert kinds == {"run", "length", "decompose", "layers", "cause"}
    assert len(settings) == 5


MODEL_CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 8}


def _unchanged(root: Path):
    """The files under ``root`` with their bytes (dot files aside)."""
    return {p: p.read_bytes() for p in root.rglob("*") if p.is_file() and p.name[0] != "."}


@pytest.mark.parametrize("command", CASES)
def test_an_out_that_is_a_model_folder_is_refused_naming_it(command, tmp_path):
    """A Hugging Face model folder keeps a config.json too: it is named, not taken for a
    run or length folder with other settings."""
    cls, config, _ = CASES[command]
    (tmp_path / "config.json").write_text(json.dumps(MODEL_CONFIG))
    (tmp_path / "model.safetensors").write_bytes(b"weights")
    before = _unchanged(tmp_path)
    message = (
        f"is not a posgen {command} folder: it is a model folder (its config.json is a "
        "Hugging Face model config, model_type llama); choose another --out"
    )
    with pytest.raises(RunConflictError, match=re.escape(message)), cls.create(tmp_path, config):
        pass
    assert _unchanged(tmp_path) == before and not (tmp_path / LOCK_FILE).exists()


@pytest.mark.parametrize(("command", "other"), [(c, o) for c in CASES for o in CASES if c != o])
def test_an_out_that_is_another_commands_folder_is_refused_naming_it(command, other, tmp_path):
    cls, config, _ = CASES[command]
    other_cls, other_config, _ = CASES[other]
    _write_one(other_cls.start(tmp_path, other_config))
    before = _unchanged(tmp_path)
    message = f"is not a posgen {command} folder: it is a posgen {other} folder (written by posgen {other}"
    with pytest.raises(RunConflictError, match=re.escape(message)), cls.create(tmp_path, config):
        pass
    assert _unchanged(tmp_path) == before


FOREIGN = {"other JSON": '{"kind": "mine", "a": 1}', "invalid JSON": "{not json", "a list": "[1]"}


@pytest.mark.parametrize("content", FOREIGN)
@pytest.mark.parametrize("command", CASES)
def test_a_settings_file_that_is_not_posgens_is_refused_naming_it(command, content, tmp_path):
    """A file named as the command's settings that posgen did not write: the folder is
    not resumed, and the refusal says the file is not posgen's."""
    cls, config, _ = CASES[command]
    (tmp_path / cls.settings).write_text(FOREIGN[content])
    message = f"it is a folder whose {cls.settings} is not posgen's ("
    with pytest.raises(RunConflictError, match=re.escape(message)), cls.create(tmp_path, config):
        pass
    assert (tmp_path / cls.settings).read_text() == FOREIGN[content]


@pytest.mark.parametrize("command", ["run", "decompose", "layers", "cause"])
def test_own_settings_this_posgen_cannot_read_are_refused_on_resume(command, tmp_path):
    """A folder of the command written under another schema is refused in one error of
    the protocol (not a SchemaError the command does not expect), nothing overwritten."""
    cls, config, _ = CASES[command]
    _write_one(cls.start(tmp_path, config))
    path = tmp_path / cls.settings
    key = "schema_version" if command == "run" else "schema"
    path.write_text(json.dumps({**json.loads(path.read_text()), key: 99}))
    before = _unchanged(tmp_path)
    with (
        pytest.raises(RunConflictError, match=r"99.*nothing was overwritten; choose another --out"),
        cls.create(tmp_path, config),
    ):
        pass
    assert _unchanged(tmp_path) == before


LEGACY, CONTENT = "local:d7ae4e6c69d6", "local-content:0123456789abcdef"


def _each_entry(config, change):
    """``config`` with ``change(entry, twin_suffix)`` applied to every model entry."""
    from dataclasses import fields

    def one(e: ModelEntry) -> ModelEntry:
        twin = (e.revision or "").partition("+")[2]
        return change(e, f"+{twin}" if twin else "")

    out = {}
    for f in fields(config):
        value = getattr(config, f.name)
        if isinstance(value, ModelEntry):
            out[f.name] = one(value)
        elif isinstance(value, tuple) and value and isinstance(value[0], ModelEntry):
            out[f.name] = tuple(one(e) for e in value)
    return replace(config, **out)


def _legacy(config):
    """As a release before content identity wrote it: ``local:<12 hex>`` revisions."""
    return _each_entry(config, lambda e, twin: replace(e, revision=LEGACY + twin))


def _now(config, legacy: str = LEGACY):
    """As posgen identifies the model now, with its legacy revision computed again."""
    return _each_entry(
        config,
        lambda e, twin: replace(e, revision=CONTENT + twin, legacy_revision=legacy + twin),
    )


@pytest.mark.parametrize("command", CASES)
def test_a_folder_from_before_content_identity_resumes_with_a_note(command, tmp_path, caplog):
    """Its model's legacy revision is the one recorded: it resumes under that revision
    (nothing recomputed, nothing rewritten) and says a same-size change cannot be seen."""
    cls, config, _ = CASES[command]
    out = tmp_path / "out"
    with cls.create(out, _legacy(config)) as folder:
        finished = _write_one(folder)
    settings = (out / cls.settings).read_bytes()
    with caplog.at_level("WARNING", logger="posgen"), cls.create(out, _now(config)) as folder:
        assert _has_one(folder) and _typed(folder) == _legacy(config)
    assert (out / cls.settings).read_bytes() == settings and finished.is_file()
    (note,) = [r.getMessage() for r in caplog.records if "before posgen identified" in r.message]
    assert str(out) in note and LEGACY in note and "cannot be detected" in note
    assert "another --out" in note and "\n" not in note


@pytest.mark.parametrize("command", CASES)
def test_a_folder_from_before_with_other_weights_is_refused_naming_the_revision(
    command, tmp_path, caplog
):
    cls, config, _ = CASES[command]
    out = tmp_path / "out"
    with cls.create(out, _legacy(config)) as folder:
        _write_one(folder)
    settings = (out / cls.settings).read_bytes()
    with (
        caplog.at_level("WARNING", logger="posgen"),
        pytest.raises(RunConflictError, match=rf"revision: '{LEGACY}.*' -> '{CONTENT}"),
        cls.create(out, _now(config, legacy="local:000000000000")),
    ):
        pass
    assert (out / cls.settings).read_bytes() == settings
    assert not [r for r in caplog.records if "before posgen identified" in r.message]


def test_a_run_folder_from_before_that_finished_nothing_takes_content_identity(tmp_path):
    out = tmp_path / "out"
    _, config, _ = CASES["run"]
    RunStore.start(out, _legacy(config))
    assert RunStore.start(out, _now(config)).run_config == _now(config)
