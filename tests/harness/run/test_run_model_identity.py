"""``posgen run`` resumed after its model folder changed (integration tier, tiny model): a
checkpoint rewritten at the same path with the same size is refused before any cell; an
unchanged one resumes; a folder written before content identity resumes with a note."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from synthetic_run import cli

pytestmark = pytest.mark.heavy

ARGS = ["--suite", "posgen_prose", "--kinds", "text", "--rates", "0,0.5", "--limit", "2"]


def run(model: Path, out: Path) -> int:
    return cli(["run", "--model", str(model), *ARGS, "--no-progress", "--out", str(out)])


@pytest.fixture(scope="module")
def model(tiny_model_dir, tmp_path_factory) -> Path:
    """A model folder of the test's own (the tests rewrite its weights, then put them back)."""
    path = tmp_path_factory.mktemp("identity") / "checkpoint"
    shutil.copytree(tiny_model_dir("llama", 0), path)
    return path


@pytest.fixture(scope="module")
def finished(model, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("identity-run") / "run"
    assert run(model, out) == 0
    return out


def killed(finished: Path, where: Path) -> tuple[Path, Path]:
    """A copy of the finished run with its perturbed cell gone: a run killed before it."""
    out = shutil.copytree(finished, where)
    (victim,) = (out / "cells").rglob("*text_swap*.json")
    victim.unlink()
    return out, victim


def counted_cells(monkeypatch) -> list[str]:
    from posgen.harness.run import cells as sweep_cells

    seen: list[str] = []
    original = sweep_cells.ModelSession.evaluate

    def counting(self, cell):
        seen.append(cell.cell_id)
        return original(self, cell)

    monkeypatch.setattr(sweep_cells.ModelSession, "evaluate", counting)
    return seen


def test_a_same_size_checkpoint_at_the_same_path_is_refused_before_any_cell(
    model, finished, tiny_model_dir, tmp_path, monkeypatch, capsys
):
    out, victim = killed(finished, tmp_path / "run")
    weights = model / "model.safetensors"
    original = weights.read_bytes()
    retrained = (tiny_model_dir("llama", 1) / "model.safetensors").read_bytes()
    assert len(retrained) == len(original) and retrained != original
    seen = counted_cells(monkeypatch)
    config = (out / "config.json").read_bytes()
    try:
        weights.write_bytes(retrained)  # the same name and size: another checkpoint
        assert run(model, out) == 2
    finally:
        weights.write_bytes(original)
    err = capsys.readouterr().err
    assert "holds a run with a different config" in err
    assert "models[0].revision: 'local-content:" in err and "nothing was overwritten" in err
    assert seen == [] and not victim.exists() and (out / "config.json").read_bytes() == config


def test_an_unchanged_checkpoint_resumes_only_the_missing_cell(
    model, finished, tmp_path, monkeypatch
):
    out, victim = killed(finished, tmp_path / "run")
    seen = counted_cells(monkeypatch)
    assert run(model, out) == 0
    assert seen == [victim.stem] and victim.is_file()


def test_a_run_folder_from_before_content_identity_resumes_with_a_note(
    model, tmp_path, monkeypatch, caplog
):
    """Written by a release that recorded ``local:<12 hex>`` (names and sizes): the rerun
    resumes under that revision and says that a same-size change cannot be seen."""
    from posgen.harness.loading import entries, identity

    monkeypatch.setattr(entries, "content_revision", identity.legacy_revision)
    finished = tmp_path / "legacy"
    assert run(model, finished) == 0
    monkeypatch.undo()
    out, victim = killed(finished, tmp_path / "run")
    legacy = identity.legacy_revision(model)
    assert f'"revision": "{legacy}"' in (out / "config.json").read_text()
    seen = counted_cells(monkeypatch)
    with caplog.at_level("WARNING", logger="posgen"):
        assert run(model, out) == 0
    assert seen == [victim.stem]
    notes = [r.getMessage() for r in caplog.records if "before posgen identified" in r.message]
    assert len(notes) == 1 and legacy in notes[0] and "cannot be detected" in notes[0]
