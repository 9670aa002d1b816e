"""``posgen cause`` on a learned-absolute model (tiny random GPT-2): its ``logits=``
cells run, the prediction does not apply (positions enter once, before the first layer)
and the report says so; the folder resumes and refuses other settings; ``posgen report``
and ``--combine`` with a rotary folder read it; a model without positions stays refused."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posgen.harness.cli import build_parser
from posgen.harness.cli import main as cli_main
from posgen.harness.cli.cause import main

pytestmark = pytest.mark.heavy

ARGS = ("--limit", "2", "--forms", "additive", "--controls", "shuffled", "--no-progress")
NOT_MADE = "Not made: this model's learned absolute positions enter once"


def run(*argv: str) -> int:
    return main(build_parser("cause").parse_args(["cause", *argv]))


@pytest.fixture(scope="module")
def gpt2(tiny_model_dir) -> Path:
    return tiny_model_dir("gpt2", 0)


@pytest.fixture(scope="module")
def folder(gpt2, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cause-absolute") / "run"
    assert run("--model", str(gpt2), "--out", str(out), *ARGS) == 0
    return out


def test_the_cells_run_and_the_prediction_does_not(folder):
    cells = sorted(p.stem for p in (folder / "cells").iterdir())
    expected = ["additive-all", "additive-layer-000", "additive-layer-001", "plain"]
    assert cells == sorted([*expected, "shuffled-all"])
    plain = json.loads((folder / "cells" / "plain.json").read_text())["loglikelihood"]
    moved = json.loads((folder / "cells" / "shuffled-all.json").read_text())["loglikelihood"]
    assert moved != plain  # logits= acted on the model
    assert not (folder / "prediction.parquet").exists()
    assert json.loads((folder / "cause.json").read_text())["config"]["schemes"] == []
    scores = json.loads((folder / "cause_scores.json").read_text())
    assert scores["positions"] == "absolute"
    assert scores["prediction"] == [] and scores["prediction_layers"] == []
    assert {r["cell"] for r in scores["nll"]} == set(cells) - {"plain"}
    md = (folder / "cause.md").read_text()
    assert "**Not answered (no prediction for learned absolute positions).**" in md
    assert md.count(NOT_MADE) == 1 and "| scheme |" not in md
    assert (folder / "cause.png").read_bytes()[:4] == b"\x89PNG"


def test_a_rerun_resumes_and_other_settings_are_refused(folder, gpt2, capsys):
    argv = ("--model", str(gpt2), "--out", str(folder))
    assert run(*argv, *ARGS) == 0
    assert "0 step(s)" in capsys.readouterr().out
    assert run(*argv, "--limit", "2", "--forms", "key", "--controls", "shuffled") == 2
    assert "other settings (forms: ['additive'] -> ['key'])" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, flag",
    [(["--positions", "swap:0.2"], "--positions"), (["--layers-run", "x"], "--layers-run")],
)
def test_prediction_flags_are_refused_before_loading(
    gpt2, argv, flag, capsys, tmp_path, monkeypatch
):
    import posgen.harness.cause.runner as cause_runner

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(cause_runner, "load_entry_lm", no_loading)
    out = tmp_path / "out"
    assert run("--model", str(gpt2), "--out", str(out), *argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"{flag}: " in err and "has learned absolute positions" in err
    assert err.endswith(f"drop {flag}") and not out.exists()


def test_posgen_report_remakes_the_folder(folder, tmp_path):
    copy = tmp_path / "copy"
    import shutil

    shutil.copytree(folder, copy)
    for name in ("cause.md", "cause_scores.json", "cause.png"):
        (copy / name).unlink()
    assert cli_main(["report", str(copy)]) == 0
    assert (copy / "cause.md").read_text() == (folder / "cause.md").read_text()


def test_combine_with_a_rotary_folder(folder, positional_model_dir, tmp_path):
    rope = tmp_path / "rope"
    argv = ("--model", str(positional_model_dir), "--out", str(rope), "--limit", "2")
    assert run(*argv, "--forms", "none", "--controls", "additive", "--no-progress") == 0
    both = tmp_path / "both"
    assert run("--combine", str(rope), str(folder), "--out", str(both)) == 0
    md = (both / "cause.md").read_text()
    assert md.count("### What survives the additive form") == 2
    assert md.count(NOT_MADE) == 1 and "| swap:0.2 |" in md  # the rotary one predicts
    assert "## Across models" in md


def test_a_model_without_positions_is_refused(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "out"
    assert run("--model", str(tiny_model_dir("smollm3_nope")), "--out", str(out)) == 2
    assert "has no position encoding" in capsys.readouterr().err
    assert not out.exists()
