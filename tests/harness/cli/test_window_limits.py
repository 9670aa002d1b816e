"""The commands on models whose positions end at a config field shorter than their
default windows (GPT-2's ``n_positions``, OPT's ``max_position_embeddings``, MPT's
``max_seq_len``, all 128 here): a window asked for past it is refused in one line before
weights load; a default past it is held to it, and the folder records what was applied."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posgen.harness.cli import main as cli_main
from tiny_models import SHORT_TABLE

pytestmark = pytest.mark.heavy

FIELDS = {"gpt2": "n_positions", "opt": "max_position_embeddings", "mpt": "max_seq_len"}


@pytest.fixture
def no_weights(monkeypatch, tmp_path):
    """Loading weights or a tokenizer fails the test (a config may be read); the working
    folder is empty, so anything written shows."""
    from lm_eval.models.huggingface import HFLM

    from posgen.harness import loading
    from posgen.harness.run import cells

    def refuse(*a, **k):
        raise AssertionError("a model or tokenizer was loaded")

    for name in ("load_model", "load_tokenizer"):
        monkeypatch.setattr(loading, name, refuse)
    monkeypatch.setattr(cells.ModelSession, "__enter__", refuse)
    monkeypatch.setattr(HFLM, "__init__", refuse)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def refused(argv: list[str], capsys, cwd: Path) -> str:
    """The one line a refused command prints; nothing is written."""
    capsys.readouterr()
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert list(cwd.iterdir()) == []
    return err


@pytest.mark.parametrize("arch", sorted(FIELDS))
def test_decompose_refuses_tokens_past_the_positions_before_weights_load(
    short_table_dir, no_weights, capsys, arch
):
    path = short_table_dir(arch)
    argv = ["decompose", "--model", str(path), "--tokens", "256", "--out", str(no_weights / "o")]
    err = refused(argv, capsys, no_weights)
    assert f"--tokens 256: {path}'s config sets {FIELDS[arch]} = {SHORT_TABLE}" in err
    assert f"pass --tokens {SHORT_TABLE} or less" in err


def test_decompose_holds_its_default_tokens_to_the_positions(short_table_dir, tmp_path, capsys):
    out = tmp_path / "out"
    argv = ["decompose", "--model", str(short_table_dir("gpt2")), "--docs", "1"]
    assert cli_main([*argv, "--device", "cpu", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"note: --tokens {SHORT_TABLE}, not the default 256:" in err
    assert json.loads((out / "decompose.json").read_text())["config"]["tokens"] == SHORT_TABLE


@pytest.mark.parametrize("arch", sorted(FIELDS))
def test_the_library_decomposition_refuses_windows_past_the_positions(arch):
    """posgen.decompose on a loaded model: a ValueError naming the field, before any
    forward (not an IndexError from the table or a shape error from MPT's bias)."""
    import posgen
    from tiny_models import build_short_context_model, build_tokenizer

    model = build_short_context_model(arch, SHORT_TABLE)
    with pytest.raises(ValueError, match=f"tokens=256: the model's config sets {FIELDS[arch]}"):
        posgen.decompose(model, tokenizer=build_tokenizer(), docs=1, tokens=256, progress=False)


PROFILE_ARGS = ["--limit", "2", "--no-progress", "--device", "cpu"]


def test_cause_runs_mpt_in_windows_of_its_bias(short_table_dir, tmp_path):
    out = tmp_path / "cause"
    argv = ["cause", "--model", str(short_table_dir("mpt")), "--layers", "0", *PROFILE_ARGS]
    argv += ["--forms", "additive", "--controls", "foreign", "--positions", "swap:0.2"]
    assert cli_main([*argv, "--out", str(out)]) == 0
    assert (out / "prediction.parquet").is_file()


RUN_ARGS = ["--suite", "posgen_prose", "--kinds", "position", "--rates", "0,0.5", "--limit", "2"]


@pytest.mark.parametrize("arch", ["gpt2", "mpt"])
def test_run_holds_its_windows_to_the_positions(short_table_dir, tmp_path, capsys, arch):
    """The preset's decomposition (8 windows of 256 tokens) is held to the model's 128
    positions, said in a note, config.json and the report; the cells' rolling windows
    stay within them too (lm-eval reads GPT-2's n_positions, hf-posgen MPT's
    max_seq_len)."""
    out = tmp_path / "run"
    argv = ["run", "--model", str(short_table_dir(arch)), *RUN_ARGS, "--no-progress"]
    assert cli_main([*argv, "--device", "cpu", "--out", str(out)]) == 0
    err = capsys.readouterr().err
    assert f"probe windows of {SHORT_TABLE} tokens, not 256: {arch}'s config sets" in err
    config = json.loads((out / "config.json").read_text())["config"]
    assert config["decompose"] == {"docs": 8, "tokens": SHORT_TABLE}
    assert f"8 probe windows of {SHORT_TABLE} tokens" in (out / "report.md").read_text()
    assert len(list((out / "cells").rglob("*.json"))) >= 2


def test_layers_holds_its_windows_to_mpts_bias(short_table_dir, tmp_path, capsys):
    """MPT's cells run in rolling windows of its max_seq_len, and the default fit
    (--decompose-tokens 256) is held to it; given past it, it is refused before load."""
    model = str(short_table_dir("mpt"))
    out = tmp_path / "layers"
    argv = ["layers", "--model", model, "--layers", "0", "--decompose-docs", "1", *PROFILE_ARGS]
    assert cli_main([*argv, "--out", str(out)]) == 0
    assert f"note: --decompose-tokens {SHORT_TABLE}, not the default 256" in capsys.readouterr().err
    config = json.loads((out / "layers.json").read_text())["config"]
    assert config["decompose"] == {"docs": 1, "tokens": SHORT_TABLE}
    again = [*argv, "--decompose-tokens", "256", "--out", str(tmp_path / "past")]
    assert cli_main(again) == 2
    assert "--decompose-tokens 256: " in capsys.readouterr().err
    assert not (tmp_path / "past").exists()


@pytest.mark.parametrize("arch", ["bloom", "mpt", "falcon_alibi"])
def test_layers_refuses_qk_noise_on_alibi_before_weights_load(
    tiny_model_dir, no_weights, capsys, arch
):
    """qk_noise moves RoPE's rotated queries and keys: an ALiBi model has none, refused
    from its config as hf-posgen refuses features=qk_noise, not after the plain cell."""
    model = str(tiny_model_dir(arch))
    argv = ["layers", "--model", model, "--positions", "none", "--features", "qk_noise:1"]
    err = refused([*argv, "--out", str(no_weights / "o")], capsys, no_weights)
    assert "qk_noise:1.0: qk noise perturbs rotary queries and keys" in err
    assert "has alibi positions: use features=rope_noise" in err
