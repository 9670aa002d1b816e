"""``posgen cause`` end to end on a tiny model with one planted positional layer: its
cells, prediction, relation to a ``posgen layers`` run, resuming, refusals, the same
position draws as the cells, a random-init twin and ``--combine``."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest
import torch

from planted_models import POSITIONAL_LAYER
from posgen.harness.cli import build_parser
from posgen.harness.cli import main as cli_main
from posgen.harness.cli.cause import main

pytestmark = pytest.mark.heavy

POSITIONAL = POSITIONAL_LAYER  # the one layer with sharp, position-dependent attention


@pytest.fixture(scope="module")
def planted(positional_model_dir) -> Path:
    return positional_model_dir


def run(*argv: str) -> int:
    return main(build_parser("cause").parse_args(["cause", *argv]))


ARGS = ("--limit", "3", "--forms", "additive;key", "--no-progress")


@pytest.fixture(scope="module")
def layers_run(planted, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("layers") / "run"
    argv = ["layers", "--model", str(planted), "--out", str(out), "--limit", "3"]
    assert cli_main([*argv, "--decompose-docs", "1", "--decompose-tokens", "64"]) == 0
    return out


@pytest.fixture(scope="module")
def folder(planted, layers_run, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("cause") / "run"
    argv = ("--model", str(planted), "--out", str(out), "--layers-run", str(layers_run))
    assert run(*argv, *ARGS) == 0
    return out


def test_the_run_writes_cells_prediction_and_report(folder):
    cells = sorted(p.stem for p in (folder / "cells").iterdir())
    forms = ["additive", "key"]
    expected = ["plain", *[f"{f}-all" for f in [*forms, "foreign", "shuffled"]]]
    expected += [f"{f}-layer-{k:03d}" for f in forms for k in range(4)]
    assert cells == sorted(expected)
    prediction = pd.read_parquet(folder / "prediction.parquet")
    assert set(prediction["scheme"]) == {"swap:0.05", "swap:0.2"}
    assert set(prediction["layer"]) == set(range(4)) and set(prediction["document"]) == {0, 1, 2}
    scores = json.loads((folder / "cause_scores.json").read_text())
    covariates = {r["covariate"] for r in scores["relation"]}
    assert covariates == {
        "predicted_change",
        "measured_change",
        "prediction_r",
        "fit_r",
        "share_distance",
    }
    assert scores["layers_run"]["scheme"] == "swap:0.2"
    md = (folder / "cause.md").read_text()
    assert "Does the additive form explain the tolerance?" in md and "mirror-shift" in md
    assert (folder / "cause.png").read_bytes()[:4] == b"\x89PNG"
    assert (folder / "cause_relation.csv").is_file()


def test_the_planted_layer_is_where_replacing_and_moving_matter(folder):
    nll = pd.read_csv(folder / "cause_nll.csv")
    one = nll[nll["layer"] != "all"].assign(layer=lambda t: t["layer"].astype(int))
    for form in ("additive", "key"):
        size = one[one["form"] == form].set_index("layer")["degradation"].abs()
        assert size.idxmax() == POSITIONAL
        assert size.drop(POSITIONAL).max() < 0.05 * size[POSITIONAL]
    pred = pd.read_csv(folder / "cause_prediction.csv").dropna(subset=["layer"])
    swap = pred[pred["scheme"] == "swap:0.2"].set_index("layer")["measured_change"]
    assert swap.idxmax() == POSITIONAL


def test_a_rerun_resumes_and_other_settings_are_refused(folder, planted, capsys):
    argv = ("--model", str(planted), "--out", str(folder))
    assert run(*argv, *ARGS) == 0
    assert "0 step(s)" in capsys.readouterr().out
    assert run(*argv, "--limit", "3", "--forms", "additive", "--no-progress") == 2
    assert "other settings (forms: " in capsys.readouterr().err


def test_the_prediction_draws_are_the_cells_draws(planted):
    """The positions predicted for a window are the ones hf-posgen plans for that very
    row when it scores the document (keyed on the window's tokens)."""
    from lm_eval.api.instance import Instance

    from posgen.harness.cause.runner import rolling_windows
    from posgen.harness.decomposition.predicted_change import perturbed_positions
    from posgen.harness.hf_posgen.model import HFPosgenLM
    from posgen.harness.prose_cells import prose_documents
    from posgen.perturbations.base import registry

    lm = HFPosgenLM(pretrained=str(planted), positions="swap:0.2", perturb_seed=7, device="cpu")
    seen = []
    lm.plan_observer = lambda inps, plan, docs: seen.append((inps, plan))
    text = prose_documents(1)[0]["text"]
    lm.loglikelihood_rolling([Instance("loglikelihood_rolling", None, (text,), 0)], True)
    (window,) = rolling_windows(lm, text)
    (inps, plan), n = seen[0], len(window)
    assert inps[0, :n].tolist() == window
    expected = perturbed_positions(window, registry.parse("position", "swap:0.2"), 7)
    assert torch.equal(plan.positions[0, :n], expected)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--forms", "aditive"], "did you mean 'additive'"),
        (["--forms", "foreign"], "foreign is a control"),
        (["--positions", "swap:0"], "moves nothing"),
        (["--positions", "scale:0.5"], "non-integer positions"),
        (["--limit", "1"], "at least 2 documents"),
        (["--forms", "none", "--controls", "none"], "at least one form"),
        # empty values: every layer (96 cells), no forms, no controls, no schemes
        (["--layers", ""], "--layers '': give a layer (12), a range (0-5)"),
        (["--forms", ""], "--forms '': give ';'-separated forms (additive;distance;key), or"),
        (["--forms", ";"], "--forms ';': give ';'-separated forms"),
        (["--controls", " "], "--controls ' ': give ';'-separated forms (foreign;shuffled)"),
        (["--positions", ""], "--positions '': give ';'-separated position schemes"),
    ],
)
def test_bad_input_is_refused_before_loading(argv, message, capsys, tmp_path, monkeypatch):
    """Refused from the flags alone: the model's entry is never read."""
    from posgen.harness import loading

    def refuse(*args, **kwargs):
        raise AssertionError("the model entry was read")

    monkeypatch.setattr(loading, "model_entries", refuse)
    monkeypatch.chdir(tmp_path)
    assert run(*argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert list(tmp_path.iterdir()) == []


def test_a_layers_run_of_other_settings_is_refused(planted, layers_run, tmp_path, capsys):
    out = tmp_path / "c"
    argv = ("--model", str(planted), "--out", str(out), "--layers-run", str(layers_run))
    assert run(*argv, "--limit", "4") == 2
    assert "--limit 3 (this run: 4)" in capsys.readouterr().err
    assert run(*argv, "--positions", "swap:0.05") == 2
    assert "not among --positions" in capsys.readouterr().err
    assert run(*argv, "--layers", "9") == 2
    assert "has 4 layers" in capsys.readouterr().err
    assert not out.exists()


def test_a_twin_and_combine(folder, planted, tmp_path, capsys):
    twin = tmp_path / "twin"
    argv = ("--model", str(planted), "--random-init", "--out", str(twin), "--limit", "2")
    assert run(*argv, "--forms", "none", "--controls", "additive", "--no-progress") == 0
    scores = json.loads((twin / "cause_scores.json").read_text())
    assert scores["random_init"] and scores["model"].endswith("+random-init")
    both = tmp_path / "both"
    assert run("--combine", str(folder), str(twin), "--out", str(both)) == 0
    md = (both / "cause.md").read_text()
    assert "## Across models" in md and "not estimable: 1 model(s)" in md
    assert md.count("### What survives the additive form") == 2
    capsys.readouterr()
    assert run("--combine", str(folder), str(folder), "--out", str(tmp_path / "x")) == 2
    assert "named twice" in capsys.readouterr().err
    assert run("--combine", str(folder), "--out", str(folder)) == 2
    assert run("--combine", str(folder), "--limit", "4", "--out", str(tmp_path / "y")) == 2
    assert "drop --limit" in capsys.readouterr().err


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--layers", "7"], "has 4 layers"),
        (["--layers", "2-x"], "is not a layer"),
        (["--forms", "additive;additive"], "a name is given twice"),
        (["--forms", "additive", "--controls", "additive"], "the same form twice"),
        (["--positions", "swap:abc"], "swap"),
        (["--positions", "none"], "at least one position scheme"),
        (["--layers-run", "nowhere"], "--layers-run nowhere"),
    ],
)
def test_bad_input_on_a_model_is_refused_before_loading(
    planted, argv, message, capsys, tmp_path, monkeypatch
):
    """Refusals that read the model's config (no weights): one line, exit 2, the model
    never loaded, nothing written."""
    import posgen.harness.cause.runner as cause_runner

    def no_loading(*args, **kwargs):
        raise AssertionError("a model was loaded")

    monkeypatch.setattr(cause_runner, "load_entry_lm", no_loading)
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "out"
    assert run("--model", str(planted), "--out", str(out), *argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert err.startswith("posgen cause: ") and not out.exists()


def test_a_folder_not_a_layers_run_is_refused(planted, tmp_path, capsys):
    """(A model without positions: tests/harness/cause/test_cause_absolute.py.)"""
    out = tmp_path / "out"
    assert run("--model", str(planted), "--out", str(out), "--layers-run", str(planted)) == 2
    err = capsys.readouterr().err
    assert f"--layers-run {planted}: {planted} is a model folder (its config.json is a " in err
    assert "not a posgen layers folder (written by posgen layers)" in err, err
    assert not out.exists()


def test_a_rerun_keeps_the_layers_run_it_was_given(folder, planted, capsys):
    """The folder remembers its --layers-run: a rerun without it still relates to it."""
    assert run("--model", str(planted), "--out", str(folder), *ARGS) == 0
    scores = json.loads((folder / "cause_scores.json").read_text())
    assert scores["layers_run"]["scheme"] == "swap:0.2" and scores["relation"]


def test_a_limit_past_the_documents_records_the_documents_that_ran(
    planted, tmp_path, capsys, monkeypatch
):
    """lm-eval reads --limit as "at most": --limit 100000 runs every posgen_prose
    document, the folder records that count (the same settings as --limit <count>), and
    one note line says so."""
    import posgen.harness.cause.runner as runner
    import posgen.results.report.folder_reports as reports
    from posgen.tasks.offline import load_rows

    ran = []
    monkeypatch.setattr(runner, "run", lambda folder, *a: ran.append(folder.config.limit) or {})
    monkeypatch.setattr(reports, "regenerate_cause", lambda folder: {"md": folder.root / "x.md"})
    count = len(load_rows("posgen_prose.jsonl"))
    out = tmp_path / "c"
    assert run("--model", str(planted), "--out", str(out), "--limit", "100000") == 0
    assert ran == [count]
    assert json.loads((out / "cause.json").read_text())["config"]["limit"] == count
    assert capsys.readouterr().err.strip().splitlines() == [
        f"posgen cause: note: --limit 100000: posgen_prose has {count} documents; all "
        f"{count} run and the folder records --limit {count}"
    ]
    assert run("--model", str(planted), "--out", str(out), "--limit", str(count)) == 0
    assert ran == [count, count] and capsys.readouterr().err == ""
