"""``posgen run`` and the gate on the real embedded model (slow tier)."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pandas as pd
import pytest

from synthetic_run import cli

pytestmark = pytest.mark.slow

# the gate reads the cells only: the decomposition on --quick's 2 documents; text cells
# (which the weakened model leaves alone) and position cells (which it doubles)
GATE_ARGS = ["--quick", "--suite", "posgen_prose", "--kinds", "text,position"]
GATE_ARGS += ["--rates", "0,0.05", "--limit", "6", "--no-progress"]


@pytest.mark.long
@pytest.mark.timeout(600)
def test_posgen_run_quick_end_to_end(embedded_model_dir, tmp_path):
    """The command as a user types it, on the real model: --quick's documents, windows and
    decomposition; the prose task at the rate where order clearly matters (the offline
    suite's other tasks and the full grids run on tiny models in test_run.py)."""
    out = tmp_path / "quick"
    start = time.monotonic()
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "posgen.harness.cli",
            "run",
            "--quick",
            "--suite",
            "posgen_prose",
            "--rates",
            "0,0.5",
            "--no-progress",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    elapsed = time.monotonic() - start
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "report in" in proc.stdout
    print(f"posgen run --quick: {elapsed:.0f} s")
    html = (out / "report.html").read_text()
    assert "data:image/png;base64," in html and "dequantized" in html
    degr = pd.read_parquet(out / "degradation.parquet")
    prose = degr[(degr["metric"] == "word_perplexity") & (degr["rate"] == 0.5)]
    # the trained model depends on order: half the words or positions moved hurts, clearly
    for kind in ("text", "position"):
        row = prose[prose["kind"] == kind].iloc[0]
        assert row["ci_lo"] > 0.10, row
    scores = json.loads((out / "scores.json").read_text())
    assert 0 < scores["fit"]["embedded"]["r_3axis"] <= 1


def _noisier_positions():
    """hf-posgen whose positions are twice as noisy as asked: a weakened model."""
    from posgen.harness.hf_posgen.model import HFPosgenLM

    class NoisierPositions(HFPosgenLM):
        def set_perturbation(self, positions=None, features=None, seed=1234, *rest, **where):
            double = {"positions": positions, "features": features}
            for key, spec in double.items():
                if spec:
                    name, _, value = spec.partition(":")
                    double[key] = (
                        f"{name}:{min(2 * float(value), 1.0 if key == 'positions' else 1e9)!r}"
                    )
            return super().set_perturbation(
                double["positions"], double["features"], seed, *rest, **where
            )

    return NoisierPositions


@pytest.mark.long
@pytest.mark.timeout(600)
def test_gate_passes_on_another_seed_and_fails_a_weakened_model(
    embedded_model_dir, tmp_path, monkeypatch, capsys
):
    run = ["run", "--model", "embedded", *GATE_ARGS]
    assert cli([*run, "--out", str(tmp_path / "base"), "--seed", "1"]) == 0
    assert cli(["baseline", str(tmp_path / "base"), "-o", str(tmp_path / "b.json")]) == 0
    assert cli([*run, "--out", str(tmp_path / "seed2"), "--seed", "2"]) == 0
    capsys.readouterr()
    other_seed = ["check", str(tmp_path / "seed2"), "--baseline", str(tmp_path / "b.json")]
    assert cli([*other_seed, "--allow-other-seed"]) == 0, capsys.readouterr().out
    import posgen.harness.hf_posgen.entry_lm as loaded  # where the sweep builds its model

    monkeypatch.setattr(loaded, "HFPosgenLM", _noisier_positions())
    assert cli([*run, "--out", str(tmp_path / "weak"), "--seed", "1"]) == 0  # the CI recipe
    capsys.readouterr()
    code = cli(
        [
            "check",
            str(tmp_path / "weak"),
            "--baseline",
            str(tmp_path / "b.json"),
            "--junit-xml",
            str(tmp_path / "gate.xml"),
        ]
    )
    out = capsys.readouterr().out
    assert code == 1, out
    failed = [line for line in out.splitlines() if line.endswith("FAIL")]
    assert failed and all(" text/" not in line for line in failed)  # text cells unchanged
