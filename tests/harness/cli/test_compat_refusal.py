"""An installed release that moved an internal posgen uses (here: the model family's
``apply_rotary_pos_emb`` taking other parameters) stops ``posgen cause``, ``posgen
layers``, ``posgen run``, ``posgen decompose``, ``posgen length`` and ``hf-posgen``
before their first cell: one line naming the internal, exit status 2, no weights loaded
and nothing written (``posgen cause`` used to compute every cell and die in its
prediction step)."""

from __future__ import annotations

import pytest

from posgen import compat
from posgen.harness.cli import main as cli_main

MOVED = "transformers.models.llama.modeling_llama:rotate_half"  # (x), not (q, k, cos, sin)


@pytest.fixture
def moved_rotary(monkeypatch, tmp_path):
    """The llama family's rotary function listed where one with other parameters lies;
    loading weights or starting a cell fails the test; an empty working folder."""
    from posgen.harness import loading
    from posgen.harness.cause import runner as cause_runner
    from posgen.harness.decomposition import runner as decompose_runner
    from posgen.harness.layers import runner
    from posgen.harness.run import cells

    def refuse(*a, **k):
        raise AssertionError("weights were loaded or a cell started")

    monkeypatch.setitem(compat.ROTARY_FUNCTIONS, "llama", MOVED)
    monkeypatch.setattr(runner, "load_entry_lm", refuse)
    monkeypatch.setattr(cause_runner, "load_entry_lm", refuse)
    monkeypatch.setattr(cells.ModelSession, "__enter__", refuse)
    monkeypatch.setattr(decompose_runner, "decompose_model", refuse)
    monkeypatch.setattr(loading, "load_model", refuse)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.mark.parametrize(
    "command",
    [
        ["cause", "--limit", "2", "--forms", "additive", "--controls", "none", "--no-progress"],
        ["layers", "--limit", "2", "--no-progress"],
        ["run", "--kinds", "text", "--quick", "--no-progress"],
        ["decompose", "--docs", "1", "--tokens", "16"],
        [
            "length",
            "--trained-context",
            "32",
            "--max-length",
            "64",
            "--documents",
            "1",
            "--schemes",
            "none",
        ],
    ],
    ids=lambda c: c[0],
)
def test_a_moved_rotary_function_stops_the_command_before_its_first_cell(
    command, moved_rotary, tiny_model_dir, capsys
):
    model = tiny_model_dir("llama", 0)
    out = moved_rotary / "out"
    capsys.readouterr()  # the fixture's own output
    assert cli_main([*command, "--model", str(model), "--out", str(out)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert f"{MOVED}: parameters start ('x',)" in err and "installed libraries" in err, err
    assert list(moved_rotary.iterdir()) == []  # no folder, nothing written


def test_hf_posgen_refuses_a_moved_rotary_function_before_weights_load(
    moved_rotary, tiny_model_dir, monkeypatch
):
    from lm_eval.models.huggingface import HFLM

    from posgen.harness.hf_posgen.model import HFPosgenLM

    def refuse(*a, **k):
        raise AssertionError("HFLM started loading the weights")

    monkeypatch.setattr(HFLM, "__init__", refuse)
    model = str(tiny_model_dir("llama", 0))
    with pytest.raises(compat.CompatError, match=r"rotate_half: parameters start \('x',\)"):
        HFPosgenLM(pretrained=model, positions="swap:0.1", layers="1", heads="0")


def test_a_model_of_another_family_is_not_refused_for_llama(moved_rotary, tiny_model_dir):
    from posgen.harness.hf_posgen.pretrained_config import require_compatible

    require_compatible(str(tiny_model_dir("qwen2", 0)), {})
    with pytest.raises(compat.CompatError):
        require_compatible(str(tiny_model_dir("llama", 0)), {})


def test_the_check_passes_on_the_installed_libraries(tiny_model_dir):
    from posgen.harness.loading import model_entries, require_compatible
    from posgen.harness.loading.options import LoadOptions

    entries = model_entries([str(tiny_model_dir("llama", 0))], LoadOptions())
    require_compatible(entries)  # raises LoadError on a mismatch
