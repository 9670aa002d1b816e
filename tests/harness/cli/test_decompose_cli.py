"""``posgen decompose`` loads its model through the shared loader: the loading flags of
``posgen run`` reach the weights (integration tier, tiny model)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pytest

from posgen.harness.cli import main as cli_main
from tiny_models import save_tiny_adapter

pytestmark = pytest.mark.heavy


def test_decompose_measures_the_adapter_and_the_twin(tiny_model_dir, tmp_path, capsys):
    model = tiny_model_dir("llama", 0)
    adapter = save_tiny_adapter(model, tmp_path / "lora")
    argv = ["decompose", "--model", str(model), "--docs", "1", "--tokens", "24", "--device", "cpu"]
    assert cli_main([*argv, "--random-init", "--out", str(tmp_path / "base")]) == 0
    assert cli_main([*argv, "--peft", str(adapter), "--out", str(tmp_path / "peft")]) == 0
    assert "posgen decompose: wrote" in capsys.readouterr().out
    base = pd.read_parquet(tmp_path / "base" / "heads.parquet")
    peft = pd.read_parquet(tmp_path / "peft" / "heads.parquet")
    assert sorted(base["random_init"].unique()) == [False, True]
    trained = base[~base["random_init"]].reset_index(drop=True)
    assert len(trained) == len(peft)
    assert not np.allclose(trained["r_3axis"], peft["r_3axis"])


def test_an_interrupted_decompose_resumes_and_other_settings_are_refused(
    tiny_model_dir, tmp_path, capsys, monkeypatch
):
    """Killed while fitting the twin, the rerun keeps the model's fit and computes only the
    twin's; a rerun with other settings is refused, naming them, and nothing changes."""
    import pytest

    import posgen.harness.decomposition.runner as runner

    out = tmp_path / "out"
    argv = ["decompose", "--model", str(tiny_model_dir("llama", 0)), "--docs", "1"]
    argv += ["--tokens", "24", "--device", "cpu", "--random-init", "--out", str(out)]
    fit = runner.decompose_model
    calls = []

    def killed_at_the_twin(entry, random_init=False, **kw):
        calls.append(random_init)
        if random_init:
            raise KeyboardInterrupt
        return fit(entry, random_init=random_init, **kw)

    monkeypatch.setattr(runner, "decompose_model", killed_at_the_twin)
    with pytest.raises(KeyboardInterrupt):
        cli_main(argv)
    trained = out / "cells" / "trained.parquet"
    stamp = trained.stat().st_mtime_ns
    assert not (out / "cells" / "random_init.parquet").exists()
    calls.clear()
    monkeypatch.setattr(
        runner, "decompose_model", lambda *a, **kw: calls.append(kw) or fit(*a, **kw)
    )
    assert cli_main(argv) == 0
    assert [kw["random_init"] for kw in calls] == [True]  # the model's fit was kept
    assert trained.stat().st_mtime_ns == stamp
    heads = pd.read_parquet(out / "heads.parquet")
    assert sorted(heads["random_init"].unique()) == [False, True]
    capsys.readouterr()
    settings = (out / "decompose.json").read_bytes()
    assert cli_main([*argv[:-2], "--tokens", "32", "--out", str(out)]) == 2
    err = capsys.readouterr().err
    assert "other settings" in err and "tokens: 24 -> 32" in err
    assert (out / "decompose.json").read_bytes() == settings


@pytest.mark.parametrize("arch", ["mpt", "falcon_alibi"])
def test_decompose_fits_mpt_and_falcon_alibi(tiny_model_dir, tmp_path, arch):
    """MPT's logits are captured where its attention adds its bias, Falcon's at its sdpa
    call: the command fits them (full and q·k alone)."""
    argv = ["decompose", "--docs", "1", "--tokens", "16", "--device", "cpu"]
    out = tmp_path / arch
    assert cli_main([*argv, "--model", str(tiny_model_dir(arch, 0)), "--out", str(out)]) == 0
    heads = pd.read_parquet(out / "heads.parquet")
    assert set(heads["position_family"]) == {"alibi"}
    assert set(heads["logit_part"]) == {"full", "qk"}
