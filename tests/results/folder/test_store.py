"""The run folder: atomic files, resume, refusal of a different config (unit tier)."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pandas as pd
import pytest

from posgen import atomic
from posgen.results.folder import store as store_mod
from posgen.results.folder.run_store import RunStore
from posgen.results.folder.schema import SCHEMA_VERSION, SchemaError, config_hash
from posgen.results.folder.store import RunConflictError, atomic_write_text, describe_diff

CONFIG = {"models": ["embedded"], "rates": [0.0, 0.05], "seed": 1234}


def test_config_hash_is_canonical():
    assert config_hash({"a": 1, "b": [1, 2]}) == config_hash({"b": [1, 2], "a": 1})
    assert config_hash({"a": 1}) != config_hash({"a": 2})


def test_create_writes_a_versioned_config_and_reopens(tmp_path):
    run = RunStore.start(tmp_path / "run", CONFIG)
    data = json.loads((tmp_path / "run" / "config.json").read_text())
    assert data["schema_version"] == SCHEMA_VERSION
    assert data["config_hash"] == run.config_hash == config_hash(CONFIG)
    assert RunStore.open(tmp_path / "run").config == CONFIG


def test_same_config_resumes_and_reuses_finished_cells(tmp_path):
    run = RunStore.start(tmp_path, CONFIG)
    run.write_cell(
        "embedded",
        "prose__none",
        {"cell": {"kind": "none"}},
        raw_results={"results": {}},
        samples={"t": [{"doc_id": 0}]},
    )
    again = RunStore.start(tmp_path, dict(CONFIG))
    assert again.has_cell("embedded", "prose__none")
    assert not again.has_cell("embedded", "prose__text_swap_0.05")
    (cell,) = again.read_cells()
    assert cell["cell"] == {"kind": "none"} and cell["schema_version"] == SCHEMA_VERSION
    raw = tmp_path / "raw" / store_mod.slug("embedded")
    assert (raw / "prose__none.results.json").is_file()
    assert json.loads((raw / "prose__none.samples.jsonl").read_text()) == {"doc_id": 0, "task": "t"}


def test_a_different_config_is_refused_and_nothing_is_overwritten(tmp_path):
    RunStore.start(tmp_path, CONFIG).write_cell("embedded", "prose__none", {"cell": {}})
    before = (tmp_path / "config.json").read_bytes()
    with pytest.raises(RunConflictError, match=r"different config.*seed: 1234 -> 99"):
        RunStore.start(tmp_path, {**CONFIG, "seed": 99})
    assert (tmp_path / "config.json").read_bytes() == before


def test_the_refusal_names_each_differing_setting_with_both_values(tmp_path):
    old = {"seed": 1, "models": [{"label": "m", "revision": "a"}], "sweep": {"text": [0, 0.5]}}
    RunStore.start(tmp_path, old).write_cell("m", "c", {"cell": {}})
    new = {"seed": 1, "models": [{"label": "m", "revision": "b"}], "sweep": {"text": [0, 0.2]}}
    with pytest.raises(RunConflictError) as info:
        RunStore.start(tmp_path, new)
    message = str(info.value)
    assert "models[0].revision: 'a' -> 'b'" in message
    assert "sweep.text: [0, 0.5] -> [0, 0.2]" in message and "seed" not in message


def test_a_folder_whose_run_finished_nothing_takes_the_new_config(tmp_path):
    RunStore.start(tmp_path, CONFIG)  # e.g. killed while its model loaded
    run = RunStore.start(tmp_path, {**CONFIG, "seed": 99})
    assert RunStore.open(tmp_path).config == run.config == {**CONFIG, "seed": 99}


def test_a_non_empty_foreign_folder_is_refused(tmp_path):
    (tmp_path / "notes.txt").write_text("mine")
    with pytest.raises(RunConflictError, match="not a posgen run folder"):
        RunStore.start(tmp_path, CONFIG)


def test_corrupt_or_foreign_version_config_is_a_clear_error(tmp_path):
    RunStore.start(tmp_path, CONFIG)
    path = tmp_path / "config.json"
    data = json.loads(path.read_text())
    path.write_text(json.dumps({**data, "schema_version": SCHEMA_VERSION + 1}))
    with pytest.raises(SchemaError, match="schema_version"):
        RunStore.open(tmp_path)
    path.write_text(json.dumps({**data, "config": {**CONFIG, "seed": 5}}))
    with pytest.raises(SchemaError, match="corrupt"):
        RunStore.open(tmp_path)
    path.write_text("{not json")
    with pytest.raises(SchemaError, match="not valid JSON"):
        RunStore.open(tmp_path)


def test_a_cell_of_another_config_or_a_torn_file_counts_as_unfinished(tmp_path):
    run = RunStore.start(tmp_path, CONFIG)
    path = run.cell_path("m", "c")
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"schema_version": SCHEMA_VERSION, "config_hash": "x" * 64}))
    assert not run.has_cell("m", "c")
    path.write_text('{"schema_version": 1, "config_')
    assert not run.has_cell("m", "c")


def test_atomic_write_leaves_the_old_file_when_writing_fails(tmp_path, monkeypatch):
    target = tmp_path / "f.txt"
    atomic_write_text(target, "old")

    def boom(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", boom)
    with pytest.raises(OSError, match="disk full"):
        atomic_write_text(target, "new")
    assert target.read_text() == "old"
    assert [p.name for p in tmp_path.iterdir()] == ["f.txt"]  # no temporary left behind


def test_a_cells_lm_eval_folder_is_written_whole_before_its_record(tmp_path):
    run = RunStore.start(tmp_path, CONFIG)

    def fails(folder):
        (Path(folder) / "m" / "results_1.json").parent.mkdir()
        (Path(folder) / "m" / "results_1.json").write_text("{}")
        raise RuntimeError("the samples could not be written")

    with pytest.raises(RuntimeError, match="samples"):
        run.write_cell("m", "c", {"cell": {}}, lm_eval_output=fails)
    assert not run.raw_cell_dir("m", "c").exists()
    assert not list(tmp_path.rglob(".*.tmp"))
    assert not run.has_cell("m", "c")

    def writes(folder):
        (Path(folder) / "m").mkdir()
        (Path(folder) / "m" / "results_2.json").write_text("{}")

    stale = run.raw_cell_dir("m", "c") / "m" / "results_0.json"  # an interrupted attempt's
    stale.parent.mkdir(parents=True)
    stale.write_text("{}")
    run.write_cell("m", "c", {"cell": {}}, lm_eval_output=writes)
    assert sorted(p.name for p in run.raw_cell_dir("m", "c").rglob("*.json")) == ["results_2.json"]
    assert run.has_cell("m", "c")
    assert not list(tmp_path.rglob(".*.tmp"))


def test_tables_round_trip(tmp_path):
    run = RunStore.start(tmp_path, CONFIG)
    run.write_table("results.parquet", pd.DataFrame({"a": [1, 2]}))
    assert run.read_table("results.parquet")["a"].tolist() == [1, 2]
    with pytest.raises(SchemaError, match="not found"):
        run.read_table("perdoc.parquet")


def test_slug_is_file_safe_and_distinguishes_paths():
    a, b = store_mod.slug("/models/a b/x"), store_mod.slug("/models/a_b/x")
    assert a != b and "/" not in a and " " not in a


def test_written_files_get_the_usual_mode(tmp_path):
    atomic_write_text(tmp_path / "f.txt", "x")
    assert (tmp_path / "f.txt").stat().st_mode & 0o777 == 0o666 & ~atomic._UMASK


def test_a_long_differing_value_shows_where_it_differs(tmp_path):
    """A value longer than a line is not cut: the refusal shows the span that differs,
    here past its 120th character."""
    base = "/models/" + "checkpoints-of-a-long-training-run/" * 5
    old = {**CONFIG, "model": {"path": base + "step-1000"}}
    RunStore.start(tmp_path, old).write_cell("m", "c", {"cell": {}})
    with pytest.raises(RunConflictError) as info:
        RunStore.start(tmp_path, {**CONFIG, "model": {"path": base + "step-2000"}})
    message = str(info.value)
    assert f"model.path: from character {len(base) + 5}:" in message, message
    assert "...'g-training-run/step-1000' -> ...'g-training-run/step-2000'" in message, message


def test_a_long_list_shows_the_items_that_differ():
    docs = [f"corpus/shard-{i:03d}/document.txt" for i in range(12)]
    moved = [*docs[:9], "corpus/other/document.txt", *docs[10:]]
    assert describe_diff({"documents": docs}, {"documents": moved}) == (
        "documents[9]: 'corpus/shard-009/document.txt' -> 'corpus/other/document.txt'"
    )
    assert describe_diff({"documents": docs}, {"documents": [*docs, "extra.txt"]}) == (
        "documents: 12 -> 13 items, added ['extra.txt']"
    )
    assert describe_diff({"documents": docs}, {"documents": docs[1:]}) == (
        f"documents: 12 -> 11 items, removed [{docs[0]!r}]"
    )


def test_every_differing_setting_is_named():
    old = {k: 1 for k in "abcdef"}
    text = describe_diff(old, {**old, **{k: 2 for k in "abcdef"}})
    assert text.startswith("a: 1 -> 2; b: 1 -> 2; c: 1 -> 2; d: 1 -> 2") and text.endswith(
        "and 2 more: e, f"
    )
