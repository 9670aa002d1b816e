"""``posgen run --length`` loads each model as the sweep did: a PEFT adapter's weights are
what the length section measures (integration tier, tiny short-context model)."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from posgen.harness.cli import main as cli_main
from posgen.harness.length.nll import bucket_sums
from posgen.results.folder.store import slug
from posgen.tasks.long_documents import long_documents
from tiny_models import build_short_context_model, build_tokenizer, save_tiny_adapter

pytestmark = pytest.mark.heavy

C = 64


def _direct_nll(model, ids: torch.Tensor) -> np.ndarray:
    """-log p(x_t | x_<t) from the model's own full forward (float64)."""
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].double(), dim=-1)
    return np.concatenate([[np.nan], -logp[:-1].gather(1, ids[0, 1:, None])[:, 0].numpy()])


def test_run_peft_length_measures_the_adapter(tmp_path):
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    model_dir = tmp_path / "tiny-short"
    build_short_context_model("llama", max_positions=C).save_pretrained(model_dir)
    tokenizer = build_tokenizer()
    tokenizer.save_pretrained(model_dir)
    adapter = save_tiny_adapter(model_dir, tmp_path / "lora")
    out = tmp_path / "run"
    argv = ["run", "--model", str(model_dir), "--peft", str(adapter), "--kinds", "text"]
    argv += ["--rates", "0,0.5", "--suite", "posgen_prose", "--limit", "1", "--no-progress"]
    assert cli_main([*argv, "--length", "quick", "--out", str(out)]) == 0

    (folder,) = (out / "length").iterdir()
    assert folder.name == slug("tiny-short")
    config = json.loads((folder / "config.json").read_text())["config"]
    assert config["model_entry"]["peft"] == str(adapter)
    record = json.loads((folder / "docs" / slug("none") / f"{slug('hamlet')}.json").read_text())
    assert record["loaded"]["peft"] == str(adapter)

    # the length --quick measures to (F = 1.5 since infllm joined its schemes), read from the run
    length = config["max_length"]
    assert length > C
    ids = torch.tensor([tokenizer(long_documents()["hamlet"]).input_ids[:length]])
    width, n = config["bucket_width"], -(-length // config["bucket_width"])
    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    base_sums, _ = bucket_sums(_direct_nll(base, ids), width, n)
    with_adapter = PeftModel.from_pretrained(base, adapter).eval()
    adapter_sums, counts = bucket_sums(_direct_nll(with_adapter, ids), width, n)
    assert record["count"] == counts.tolist()
    np.testing.assert_allclose(record["nll_sum"], adapter_sums, rtol=1e-5)
    assert np.abs(np.subtract(record["nll_sum"], base_sums)).max() > 1e-2
