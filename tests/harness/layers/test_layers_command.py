"""``posgen layers`` end to end on a hand-built tiny model with a planted answer."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pandas as pd
import pytest

from planted_models import POSITIONAL_LAYER
from posgen.harness.cli import build_parser
from posgen.harness.cli.layers import main

pytestmark = pytest.mark.heavy

POSITIONAL = POSITIONAL_LAYER  # the one layer with sharp, position-dependent attention


@pytest.fixture(scope="module")
def planted(positional_model_dir) -> Path:
    return positional_model_dir


def run(*argv: str) -> int:
    return main(build_parser("layers").parse_args(["layers", *argv]))


ARGS = ("--limit", "3", "--positions", "shuffle", "--decompose-docs", "1", "--no-progress")


@pytest.fixture(scope="module")
def folder(planted, tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("layers") / "run"
    args = (*ARGS, "--decompose-tokens", "64")
    assert run("--model", str(planted), "--out", str(out), *args) == 0
    return out


def test_the_profile_singles_out_the_planted_layer(folder):
    """A random-weight model has no preferred order, so a perturbation moves each
    document's likelihood either way: the profile must find *where* positions matter (the
    size of the effect and of its interval), not a sign."""
    table = pd.read_csv(folder / "layer_profile.csv")
    per_layer = table[table["layer"] != "all"].assign(layer=lambda t: t["layer"].astype(int))
    per_layer = per_layer.set_index("layer")
    size = per_layer[["degradation", "ci_lo", "ci_hi"]].abs().max(axis=1)
    assert size.idxmax() == POSITIONAL
    assert size.drop(POSITIONAL).max() < 0.02 * size[POSITIONAL]


def test_the_run_writes_its_report_and_relation(folder):
    scores = json.loads((folder / "layers_scores.json").read_text())
    assert [r["layer"] for r in scores["layers"]] == [0, 1, 2, 3]
    assert {r["covariate"] for r in scores["relation"]} == {"fit_r", "share_distance"}
    assert all(r["null_size"] == 8 for r in scores["relation"])
    md = (folder / "layers.md").read_text()
    assert "mirror-shift test" in md and "| all |" in md
    assert (folder / "layers.png").read_bytes()[:4] == b"\x89PNG"
    # layers below the first perturbed one replayed the plain pass (checked bit for bit)
    cell = json.loads((folder / "cells" / "layer-002.json").read_text())
    assert cell["prefix_reuse"].startswith("on:")


def test_a_rerun_resumes_without_rescoring(folder, planted, capsys):
    before = {p.name: p.stat().st_mtime_ns for p in (folder / "cells").iterdir()}
    assert (
        run("--model", str(planted), "--out", str(folder), *ARGS, "--decompose-tokens", "64") == 0
    )
    assert {p.name: p.stat().st_mtime_ns for p in (folder / "cells").iterdir()} == before
    assert "0 step(s)" in capsys.readouterr().out


def test_other_settings_in_the_same_folder_are_refused(folder, planted, capsys):
    assert run("--model", str(planted), "--out", str(folder), *ARGS, "--seed", "9") == 2
    assert "other settings" in capsys.readouterr().err


def test_a_foreign_folder_is_not_clobbered(planted, tmp_path, capsys):
    (tmp_path / "notes.txt").write_text("mine")
    assert run("--model", str(planted), "--out", str(tmp_path), *ARGS) == 2
    assert "not a posgen layers folder" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (("--layers", "x"), "layers=x"),
        (("--layers", "2-9"), "has 4 layers"),
        (("--limit", "1"), "at least 2 documents"),
        (("--positions", "bogus:1"), "positions=bogus:1"),
        (("--positions", "none"), "give a position or feature scheme"),
        (("--positions", "swap:0"), "give a position or feature scheme"),
        (("--length-run", "/nonexistent"), "no length_scores.json"),
        (("--decompose-docs", "-1"), "--decompose-docs"),
        (("--device", "bogus"), "--device 'bogus'"),
        (("--dtype", "float8"), "--dtype"),
        (("--peft", "/nonexistent/adapter"), "no such adapter folder"),
        (("--device-map", "{not json"), "--device-map"),
    ],
)
def test_bad_input_exits_2_before_any_model_loads(planted, tmp_path, argv, message, capsys):
    out = tmp_path / "out"
    assert run("--model", str(planted), "--out", str(out), *argv) == 2
    assert message in capsys.readouterr().err
    assert not out.exists()


@pytest.mark.parametrize(
    ("arch", "message"),
    [
        ("gpt2", "learned absolute positions, which enter once before the first layer"),
        ("smollm3_nope", "has no position encoding"),
        ("falcon_alibi", "no rotary position embedding"),
    ],
)
def test_a_model_without_per_layer_positions_is_refused(
    tiny_model_dir, tmp_path, capsys, unfitted_falcon, arch, message
):
    """(Falcon-ALiBi is registered with a logits refusal for this test: an ALiBi family
    whose logits the profile cannot fit.)"""
    out, model = tmp_path / "o", tiny_model_dir(arch)
    capsys.readouterr()  # the model build's own progress
    assert run("--model", str(model), "--out", str(out), *ARGS) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not out.exists()


@pytest.mark.parametrize("arch", ["bloom", "mpt", "falcon_alibi"])
def test_an_alibi_model_gets_its_layer_profile(tiny_model_dir, tmp_path, arch):
    """BLOOM's, MPT's and Falcon's bias take the positions in the chosen layer only: every
    layer's cell runs and moves the NLL of the swapped documents; the profile's fit r is
    that of the full logits."""
    out = tmp_path / arch
    args = (*ARGS, "--decompose-tokens", "32")
    assert run("--model", str(tiny_model_dir(arch)), "--out", str(out), *args) == 0
    assert (out / "layers.md").is_file()
    scores = json.loads((out / "layers_scores.json").read_text())
    assert [row["layer"] for row in scores["layers"]] == [0, 1]
    assert all(row["degradation"] != 0 for row in scores["layers"])
    decomp = pd.read_parquet(out / "decomposition.parquet")
    full = decomp[decomp["logit_part"] == "full"].groupby("layer")["r_3axis"].mean()
    assert [row["fit_r"] for row in scores["layers"]] == pytest.approx(list(full))


def test_heads_give_one_cell_per_head_of_the_chosen_layers(planted, tmp_path):
    out = tmp_path / "heads"
    assert run("--model", str(planted), "--out", str(out), *ARGS, "--heads", "--layers", "1-2") == 0
    scores = json.loads((out / "layers_scores.json").read_text())
    assert [(r["layer"], r["head"]) for r in scores["layers"]] == [
        (i, h) for i in (1, 2) for h in range(4)
    ]
    assert all(r["null_size"] == 16 for r in scores["relation"])  # 8 heads, mirror ring
    assert all(math.isfinite(r["fit_r"]) for r in scores["layers"])
    size = {(r["layer"], r["head"]): abs(r["degradation"]) for r in scores["layers"]}
    assert max(size, key=size.get)[0] == POSITIONAL
    assert "| 2.3 |" in (out / "layers.md").read_text()


def test_combine_draws_finished_folders_into_one_report(folder, tmp_path, capsys):
    import shutil

    twin = tmp_path / "twin"
    shutil.copytree(folder, twin)
    out = tmp_path / "combined"
    assert run("--combine", str(folder), str(twin), "--out", str(out)) == 0
    assert "2 folder(s) combined" in capsys.readouterr().out
    profiles = json.loads((out / "layers_scores.json").read_text())["profiles"]
    own = json.loads((folder / "layers_scores.json").read_text())
    assert len(profiles) == 2
    # read back as written: the same figures, only the titles told apart
    assert {**profiles[0], "model": own["model"]} == own
    assert [p["model"] for p in profiles] == [
        f"{own['model']} ({folder.name})",
        f"{own['model']} (twin)",
    ]
    md = (out / "layers.md").read_text()
    assert md.count("## ") == 2 and md.count("mirror-shift test") == 2
    assert (out / "layers.png").read_bytes()[:4] == b"\x89PNG"
    sources = json.loads((out / "combined.json").read_text())["sources"]
    assert sources == [str(folder.resolve()), str(twin.resolve())]
    assert run("--combine", str(folder), "--out", str(out)) == 0  # a rerun re-draws it
    assert len(json.loads((out / "layers_scores.json").read_text())["profiles"]) == 1


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("not-layers", "not a posgen layers folder"),
        ("unfinished", "finish that run first"),
        ("twice", "named twice"),
        ("out-is-input", "is one of the --combine folders"),
        ("foreign-out", "not a combined layers report"),
        ("out-is-file", "is a file"),
        ("run-option", "drop --limit, --seed"),
    ],
)
def test_combine_bad_input_exits_2_and_writes_nothing(folder, tmp_path, case, message, capsys):
    out = tmp_path / "out"
    runs = [str(folder)]
    extra: list[str] = []
    if case == "not-layers":
        (tmp_path / "other").mkdir()
        runs.append(str(tmp_path / "other"))
    elif case == "unfinished":
        (tmp_path / "half").mkdir()
        (tmp_path / "half" / "layers.json").write_text((folder / "layers.json").read_text())
        runs.append(str(tmp_path / "half"))
    elif case == "twice":
        runs.append(str(folder))
    elif case == "out-is-input":
        out = folder
    elif case == "foreign-out":
        out.mkdir()
        (out / "notes.txt").write_text("mine")
    elif case == "out-is-file":
        out.write_text("a file")
    else:
        extra = ["--seed", "3", "--limit", "5"]
    before = sorted(p.name for p in folder.iterdir())
    assert run("--combine", *runs, "--out", str(out), *extra) == 2
    assert message in capsys.readouterr().err
    assert sorted(p.name for p in folder.iterdir()) == before
    if case == "foreign-out":
        assert [p.name for p in out.iterdir()] == ["notes.txt"]
    elif case not in ("out-is-input", "out-is-file"):
        assert not out.exists()


def test_a_limit_past_the_documents_records_the_documents_that_ran(
    planted, tmp_path, capsys, monkeypatch
):
    """As ``posgen cause``: --limit above the posgen_prose documents runs them all, and
    the folder records how many; one note line says so."""
    import posgen.harness.layers.runner as runner
    import posgen.results.report.folder_reports as reports
    from posgen.tasks.offline import load_rows

    ran = []
    monkeypatch.setattr(
        runner, "run", lambda folder, *a, **k: ran.append(folder.config.limit) or {}
    )
    monkeypatch.setattr(reports, "regenerate_layers", lambda folder: {"md": folder.root / "x.md"})
    count = len(load_rows("posgen_prose.jsonl"))
    out = tmp_path / "l"
    assert run("--model", str(planted), "--out", str(out), "--limit", str(count + 1)) == 0
    assert ran == [count]
    assert json.loads((out / "layers.json").read_text())["config"]["limit"] == count
    assert capsys.readouterr().err.strip().splitlines() == [
        f"posgen layers: note: --limit {count + 1}: posgen_prose has {count} documents; all "
        f"{count} run and the folder records --limit {count}"
    ]
