"""``posgen run`` on tiny models (integration tier) and its input checks (unit tier)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pandas as pd
import pytest

from posgen.results.folder.schema import RESULT_COLUMNS, SCHEMA_VERSION
from synthetic_run import cli

pytestmark = pytest.mark.heavy

TINY_ARGS = [
    "--suite",
    "posgen_prose",
    "--rates",
    "0,0.5",
    "--sigmas",
    "0,2",
    "--limit",
    "4",
    "--no-progress",
]


def run(model: Path | str, out: Path, *extra: str) -> int:
    return cli(["run", "--model", str(model), *TINY_ARGS, "--out", str(out), *extra])


@pytest.fixture(scope="module")
def tiny_run(tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("run") / "tiny"
    assert run(tiny_model_dir("llama", 0), out, "--random-init") == 0
    return out


def test_run_writes_every_documented_file(tiny_run):
    names = {p.name for p in tiny_run.iterdir()}
    assert {
        "config.json",
        "cells",
        "raw",
        "decomposition",
        "results.parquet",
        "perdoc.parquet",
        "scores.json",
        "report.md",
        "report.html",
    } <= names
    res = pd.read_parquet(tiny_run / "results.parquet")
    assert list(res.columns) == list(RESULT_COLUMNS)
    assert (res["schema_version"] == SCHEMA_VERSION).all()
    # one model + its random-init twin; baseline + text + position + feature per model
    assert set(res["random_init"]) == {True, False}
    cells = res[res["metric"] == "word_perplexity"]
    assert sorted(cells["kind"]) == sorted(["none", "text", "position", "feature"] * 2)
    spec = json.loads(cells[cells["kind"] == "position"]["perturbation_spec"].iloc[0])
    assert spec["kind"] == "position" and spec["params"]["rate"] == 0.5
    assert (cells["n"] == 4).all()
    assert len(list((tiny_run / "decomposition").glob("*.parquet"))) == 2
    samples = list((tiny_run / "raw").glob("*/*/*/samples_*.jsonl"))  # lm-eval's layout
    assert len(samples) == 8


def test_position_cells_really_perturb_the_model(tiny_run):
    res = pd.read_parquet(tiny_run / "results.parquet")
    res = res[(res["metric"] == "word_perplexity") & ~res["random_init"]]
    value = res.set_index("kind")["value"]
    assert value["position"] != value["none"] and value["feature"] != value["none"]
    assert value["text"] != value["none"]


def test_perdoc_carries_each_documents_realised_amount_in_every_cell(tiny_run):
    """Position and feature cells too: every document gets its rows' realised amount."""
    per = pd.read_parquet(tiny_run / "perdoc.parquet")
    assert set(per["kind"]) == {"text", "position", "feature"}
    cols = ["realised_n", "realised_fraction_moved", "realised_mean_displacement"]
    assert per[[*cols, "realised_dnd", "realised_idc"]].notna().all().all()
    model_side = per[per["kind"] != "text"]
    assert (model_side["realised_n"] > 0).all()
    assert (model_side.loc[model_side["kind"] == "feature", "realised_fraction_moved"] == 1).all()
    assert model_side.loc[model_side["kind"] == "position", "realised_fraction_moved"].gt(0).any()


def test_cross_model_with_two_models_is_not_estimable(tiny_run):
    scores = json.loads((tiny_run / "scores.json").read_text())
    assert scores["cross_model"] and all(not c["estimable"] for c in scores["cross_model"])
    assert "Not estimable" in (tiny_run / "report.md").read_text()


def test_rerun_with_the_same_config_reuses_every_cell(tiny_run, tiny_model_dir, monkeypatch):
    from posgen.harness.run import cells as sweep_cells

    def refuse(*a, **k):
        raise AssertionError("a finished cell was recomputed")

    monkeypatch.setattr(sweep_cells.ModelSession, "__enter__", refuse)
    before = {p: p.stat().st_mtime_ns for p in (tiny_run / "cells").rglob("*.json")}
    assert run(tiny_model_dir("llama", 0), tiny_run, "--random-init") == 0
    assert before == {p: p.stat().st_mtime_ns for p in (tiny_run / "cells").rglob("*.json")}


def test_an_interrupted_run_resumes_only_the_missing_cells(tiny_model_dir, tmp_path, monkeypatch):
    from posgen.harness.run import cells as sweep_cells

    out = tmp_path / "r"
    assert run(tiny_model_dir("llama", 0), out) == 0
    victim = next((out / "cells").rglob("*position*.json"))
    victim.unlink()
    seen = []
    original = sweep_cells.ModelSession.evaluate

    def counting(self, cell):
        seen.append(cell.cell_id)
        return original(self, cell)

    monkeypatch.setattr(sweep_cells.ModelSession, "evaluate", counting)
    assert run(tiny_model_dir("llama", 0), out) == 0
    assert seen == [victim.stem] and victim.is_file()


def test_a_different_config_into_the_same_folder_is_refused(tiny_run, tiny_model_dir, capsys):
    before = (tiny_run / "config.json").read_bytes()
    assert run(tiny_model_dir("llama", 0), tiny_run, "--random-init", "--seed", "7") == 2
    err = capsys.readouterr().err
    assert "different config" in err and "seed" in err
    assert (tiny_run / "config.json").read_bytes() == before


def test_gate_passes_for_the_same_model_with_another_perturbation_seed(
    tiny_run, tmp_path, tiny_model_dir, capsys
):
    baseline = tmp_path / "baseline.json"
    assert cli(["baseline", str(tiny_run), "-o", str(baseline)]) == 0
    assert run(tiny_model_dir("llama", 0), tmp_path / "seed2", "--seed", "2") == 0
    check = ["check", str(tmp_path / "seed2"), "--baseline", str(baseline)]
    assert cli(check) == 2  # other draws: refused unless asked for
    assert "seed differs" in capsys.readouterr().err
    assert cli([*check, "--allow-other-seed"]) == 0, capsys.readouterr().out


@pytest.mark.parametrize(
    "args,message",
    [
        (["--suite", "no_such_suite"], "unknown suite or lm-eval task"),
        (["--model", "/no/such/model"], "no such model folder"),
        (["--rates", "0,1.5"], "every value must be in [0, 1]"),
        (["--rates", "0,abc"], "not a comma-separated list"),
        (["--sigmas", "0,-1"], "every value must be >= 0"),
        (["--rates", "0"], "at least one value > 0"),
        (["--limit", "0"], "--limit must be >= 1"),
        (["--seed", "-1"], "--seed must be an integer in [0, 2**32)"),
        (["--threshold", "inf"], "--threshold (relative perplexity increase) must be"),
        (["--threshold", "nan"], "--threshold (relative perplexity increase) must be"),
        (["--threshold-acc", "2"], "--threshold-acc (absolute accuracy drop) must be"),
        (["--num-fewshot", "-1"], "--num-fewshot must be >= 0, got -1"),
        (["--apply-chat-template", " "], "--apply-chat-template: give a template name"),
        (["--device-map", "gpu0"], "--device-map 'gpu0': give auto, balanced"),
        (["--device-map", "{bad"], "--device-map: not valid JSON"),
        (["--device-map", "{}"], "--device-map: an empty object"),
        (["--device-map", '{"model": "gpu"}'], "--device-map: 'model': 'gpu'"),
    ],
)
def test_bad_input_is_refused_before_any_model_loads(tmp_path, monkeypatch, capsys, args, message):
    from posgen.harness.run import cells as sweep_cells

    def refuse(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(sweep_cells.ModelSession, "__enter__", refuse)
    assert cli(["run", *args, "--out", str(tmp_path / "out")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_lm_eval_env_and_git_info_are_collected_once_and_quietly(tmp_path, monkeypatch, capfd):
    import lm_eval.evaluator

    from posgen.harness.run import cells as sweep_cells

    monkeypatch.chdir(tmp_path)  # not a git repository: git describe fails there
    monkeypatch.setattr(sweep_cells, "_GIT_HASH", [])
    original = lm_eval.evaluator.get_git_commit_hash
    with sweep_cells._env_info_once():
        assert lm_eval.evaluator.get_git_commit_hash is not original
        first = lm_eval.evaluator.get_git_commit_hash()
        assert lm_eval.evaluator.get_git_commit_hash() == first
    assert lm_eval.evaluator.get_git_commit_hash is original
    cached = sweep_cells._GIT_HASH
    assert cached == [first]
    assert "fatal" not in capfd.readouterr().err
    if shutil.which("git"):  # lm-eval's own call, outside posgen's context, does complain
        original()
        assert "not a git repository" in capfd.readouterr().err


def _refuse_model_load(monkeypatch):
    from posgen.harness.run import cells as sweep_cells

    def refuse(*a, **k):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(sweep_cells.ModelSession, "__enter__", refuse)


def test_a_config_without_model_type_is_refused_before_loading(tmp_path, monkeypatch, capsys):
    _refuse_model_load(monkeypatch)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"hidden_size": 8}))
    assert run(model, tmp_path / "out") == 2
    assert "has no model_type" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()


def test_an_unreachable_hub_id_is_refused_before_loading(tmp_path, monkeypatch, capsys):
    import huggingface_hub.constants

    _refuse_model_load(monkeypatch)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    assert run("no-org/no-such-model", tmp_path / "out") == 2
    err = capsys.readouterr().err
    assert "'no-org/no-such-model'" in err and "not in the local cache" in err
    assert not (tmp_path / "out").exists()


def test_a_locked_run_folder_is_refused(tiny_model_dir, tmp_path, monkeypatch, capsys):
    from posgen.results.folder.lock import RunLock

    _refuse_model_load(monkeypatch)
    with RunLock(tmp_path / "out"):
        assert run(tiny_model_dir("llama", 0), tmp_path / "out") == 2
    assert "being written by another posgen run" in capsys.readouterr().err
    assert not (tmp_path / "out" / "config.json").exists()


def test_a_run_that_fails_to_load_leaves_no_folder(tmp_path, capsys):
    model = tmp_path / "model"  # a valid config, but no weights and no tokenizer
    model.mkdir()
    (model / "config.json").write_text(json.dumps({"model_type": "llama"}))
    with pytest.raises(Exception):  # noqa: B017  (whatever transformers raises)
        run(model, tmp_path / "out")
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(
    ("arch", "note"),
    [
        ("falcon_alibi", "has an ALiBi attention whose logits posgen run does not fit"),
        ("smollm3_nope", "has no position encoding (the causal mask is its only order signal)"),
    ],
)
def test_a_model_without_movable_positions_gets_the_text_cells_and_a_note(
    tiny_model_dir, tmp_path, capsys, unfitted_falcon, arch, note
):
    """A model without positions, and an ALiBi family registered with a logits refusal
    (Falcon's, for this test), get the text cells and a note saying why."""
    out = tmp_path / arch
    assert run(tiny_model_dir(arch, 0), out) == 0
    err = capsys.readouterr().err
    assert note in err and "it gets the text cells only" in err
    res = pd.read_parquet(out / "results.parquet")
    assert set(res["kind"]) == {"none", "text"}
    assert (out / "report.md").is_file()
    assert not (out / "decomposition").exists() or not any((out / "decomposition").iterdir())


@pytest.mark.parametrize(
    ("arch", "positions"),
    [("gpt2", "absolute"), ("bloom", "alibi"), ("mpt", "alibi"), ("falcon_alibi", "alibi")],
)
def test_learned_absolute_and_alibi_models_get_every_kind_and_the_decomposition(
    tiny_model_dir, tmp_path, capsys, arch, positions
):
    out = tmp_path / arch
    assert run(tiny_model_dir(arch, 0), out) == 0
    assert "text cells only" not in capsys.readouterr().err
    config = json.loads((out / "config.json").read_text())
    assert config["config"]["models"][0]["positions"] == positions
    res = pd.read_parquet(out / "results.parquet")
    assert set(res["kind"]) == {"none", "text", "position", "feature"}
    # a position swap moves what the model computes; its identity is the baseline itself
    ppl = res[res["metric"] == res["metric"].iloc[0]]
    base = ppl[ppl["kind"] == "none"]["value"].iloc[0]
    moved = ppl[(ppl["kind"] == "position") & (ppl["rate"] == 0.5)]["value"]
    assert len(moved) and (moved != base).all()
    (table,) = (out / "decomposition").glob("*.parquet")
    decomp = pd.read_parquet(table)
    assert set(decomp["position_family"]) == {positions}
    parts = {"absolute": {"full"}, "alibi": {"full", "qk"}}[positions]
    assert set(decomp["logit_part"]) == parts
    assert (out / "report.md").is_file()


def test_only_model_side_kinds_for_a_model_without_rope_is_refused(
    tiny_model_dir, tmp_path, monkeypatch, capsys, unfitted_falcon
):
    _refuse_model_load(monkeypatch)
    model = tiny_model_dir("falcon_alibi", 0)
    assert run(model, tmp_path / "out", "--kinds", "position,feature") == 2
    assert "add --kinds text" in capsys.readouterr().err
    assert not (tmp_path / "out").exists()
