"""``posgen decompose`` loads its model through the shared loader: the loading flags of
``posgen run`` reach the weights (integration tier, tiny model)."""

from __future__ import annotations

import numpy as np
import pandas as pd

from posgen.harness.cli import main as cli_main
from tiny_models import save_tiny_adapter


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
