"""posgen length on the non-rotary position families: ALiBi runs past C as it is."""

from __future__ import annotations

import json

from posgen.harness.cli import main as cli_main


def test_alibi_runs_past_its_trained_context_as_it_is(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "len"
    argv = ["length", "--model", str(tiny_model_dir("bloom", 0)), "--trained-context", "32"]
    assert cli_main([*argv, "--max-length", "96", "--documents", "1", "--out", str(out)]) == 0
    report = capsys.readouterr().out
    assert "| none |" in report and "| scale:" not in report  # only none ran
    scores = json.loads((out / "length_scores.json").read_text())
    assert set(scores["effective"]) == {"none"}
    assert max(c["stop"] for c in scores["curves"]) == 96  # measured past C = 32
