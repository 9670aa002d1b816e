"""What each command says of a folder that is not the one it takes: one line, exit status
2, naming what the folder is (another command's folder, a model folder, a settings file
that is not posgen's) and what the command takes; nothing written, no model touched."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest

from posgen.harness.cli import main as cli_main

DATA = Path(__file__).parents[2] / "results" / "folder" / "data"
MODEL_CONFIG = {"model_type": "llama", "architectures": ["LlamaForCausalLM"], "hidden_size": 8}
# each command's settings file, as posgen wrote it (tests/results/folder/data)
SETTINGS = {
    "length": ("length_plain.config.json", "config.json"),
    "layers": ("layers_default.layers.json", "layers.json"),
    "cause": ("cause_default.cause.json", "cause.json"),
}
FOREIGN = {"other JSON": '{"kind": "mine", "a": 1}', "invalid JSON": "{not json"}


def _folder(root: Path, command: str) -> Path:
    """A folder of ``command`` (its settings file only)."""
    root.mkdir(parents=True)
    if command == "decompose":
        from posgen.results.folder.config import ModelEntry
        from posgen.results.folder.decompose_config import DecomposeConfig, DecomposeFolder

        entry = ModelEntry(label="tiny", path="/models/tiny", embedded=False, revision=None)
        DecomposeFolder.start(root, DecomposeConfig(entry, False, docs=1, tokens=24, seed=0))
    else:
        source, name = SETTINGS[command]
        shutil.copy(DATA / source, root / name)
    return root


def _model(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps(MODEL_CONFIG))
    return root


def _refused(argv: list[str], capsys) -> str:
    """The one line of a refusal (exit status 2)."""
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    return err


def _files(root: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


@pytest.mark.parametrize("content", FOREIGN)
@pytest.mark.parametrize("name", ["config.json", "decompose.json", "layers.json", "cause.json"])
def test_report_says_a_settings_file_is_not_posgens(name, content, tmp_path, capsys):
    (tmp_path / "f").mkdir()
    (tmp_path / "f" / name).write_text(FOREIGN[content])
    err = _refused(["report", str(tmp_path / "f")], capsys)
    assert f"is not a posgen folder: it is a folder whose {name} is not posgen's (" in err, err
    assert "posgen report takes a folder written by posgen run, ingest, length" in err, err
    assert sorted(p.name for p in (tmp_path / "f").iterdir()) == [name]


def test_report_says_a_model_folder_is_one(tmp_path, capsys):
    err = _refused(["report", str(_model(tmp_path / "m"))], capsys)
    assert "is not a posgen folder: it is a model folder (its config.json is a Hugging Face " in err
    assert "model_type llama" in err


RUN_READERS = {
    "baseline": ["-o", "{tmp}/baseline.json"],
    "check": ["--baseline", "{tmp}/baseline.json"],
    "compare": ["{folder}"],
}


def _reader_argv(reader: str, folder: Path, tmp: Path) -> list[str]:
    rest = [a.format(tmp=tmp, folder=folder) for a in RUN_READERS[reader]]
    return [reader, str(folder), *rest]


@pytest.mark.parametrize("command", ["length", "decompose", "layers", "cause"])
@pytest.mark.parametrize("reader", RUN_READERS)
def test_a_run_reader_names_another_commands_folder(reader, command, tmp_path, capsys):
    """baseline, check and compare take a run folder: handed another command's, they say
    whose it is and what they take."""
    folder = _folder(tmp_path / "f", command)
    before = _files(tmp_path)
    err = _refused(_reader_argv(reader, folder, tmp_path), capsys)
    assert (
        f"{folder} is a posgen {command} folder (written by posgen {command}); posgen "
        f"{reader} takes a posgen run folder (written by posgen run or posgen ingest)"
    ) in err, err
    assert _files(tmp_path) == before


@pytest.mark.parametrize("reader", RUN_READERS)
def test_a_run_reader_handed_a_length_folder_says_where_length_cells_come_from(
    reader, tmp_path, capsys
):
    """A length folder of its own: the run readers read length runs as part of a run
    folder (posgen run --length); one inside a run folder: give that run folder."""
    alone = _folder(tmp_path / "alone", "length")
    err = _refused(_reader_argv(reader, alone, tmp_path), capsys)
    assert "and reads a length run only as part of one (posgen run --length writes" in err, err
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(DATA / "run_quick.config.json", run / "config.json")
    inner = _folder(run / "length" / "tiny", "length")
    err = _refused(_reader_argv(reader, inner, tmp_path), capsys)
    assert (
        f"{inner} is the length folder of the run folder {run} (written by posgen run "
        f"--length); posgen {reader} takes a posgen run folder"
    ) in err, err
    assert err.endswith(f": give {run}, the run folder it belongs to"), err


@pytest.mark.parametrize("reader", RUN_READERS)
def test_a_run_reader_names_a_model_folder(reader, tmp_path, capsys):
    folder = _model(tmp_path / "m")
    err = _refused(_reader_argv(reader, folder, tmp_path), capsys)
    assert f"{folder} is a model folder (its config.json is a Hugging Face model config" in err
    assert f"posgen {reader} takes a posgen run folder" in err, err


@pytest.fixture
def no_model(monkeypatch, tmp_path):
    """Any read of a model entry, config or weights fails the test."""
    from posgen.harness import embedded, loading
    from posgen.harness.run import resolve

    def refuse(*a, **k):
        raise AssertionError("the model was read before --out was checked")

    for name in ("load_model", "load_tokenizer", "load_config", "model_entries"):
        monkeypatch.setattr(loading, name, refuse)
    monkeypatch.setattr(resolve, "model_entries", refuse)
    monkeypatch.setattr(embedded, "resolve_pretrained", refuse)
    monkeypatch.chdir(tmp_path)
    return tmp_path


WRITERS = ["run", "ingest", "length", "decompose", "layers", "cause"]


def _writer_argv(command: str, out: Path, cwd: Path) -> list[str]:
    source = [str(cwd / "lm-eval-out")] if command == "ingest" else ["--model", str(cwd / "x")]
    return [command, *source, "--out", str(out)]


@pytest.mark.parametrize("command", WRITERS)
def test_an_out_that_is_a_model_folder_is_named_before_the_model_is_read(command, no_model, capsys):
    out = _model(no_model / "model")
    before = _files(no_model)
    err = _refused(_writer_argv(command, out, no_model), capsys)
    folder = "run" if command == "ingest" else command
    assert (
        f"{out} exists, is not empty and is not a posgen {folder} folder: it is a model "
        "folder (its config.json is a Hugging Face model config, model_type llama); choose "
        "another --out"
    ) in err, err
    assert _files(no_model) == before


@pytest.mark.parametrize("command", WRITERS)
def test_an_out_that_is_another_commands_folder_is_named(command, no_model, capsys):
    other = "layers" if command != "layers" else "cause"
    out = _folder(no_model / "other", other)
    before = _files(no_model)
    err = _refused(_writer_argv(command, out, no_model), capsys)
    assert f"it is a posgen {other} folder (written by posgen {other}); choose another" in err
    assert _files(no_model) == before


@pytest.mark.parametrize(("command", "other"), [("layers", "cause"), ("cause", "layers")])
def test_combine_names_another_commands_folder(command, other, tmp_path, capsys):
    folder = _folder(tmp_path / "f", other)
    before = _files(tmp_path)
    argv = [command, "--combine", str(folder), "--out", str(tmp_path / "out")]
    err = _refused(argv, capsys)
    assert (
        f"--combine {folder} is a posgen {other} folder (written by posgen {other}), not a "
        f"posgen {command} folder (written by posgen {command})"
    ) in err, err
    assert _files(tmp_path) == before
