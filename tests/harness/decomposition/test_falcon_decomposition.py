"""The decomposition and the predicted change on Falcon-ALiBi, whose logits are read at
its sdpa call (model_side/alibi/falcon_sdpa.py): the captured full logits are q·k plus the
model's √d-scaled bias, a Falcon whose logits are its bias alone is fitted (r = 1) and
predicted exactly, the measured change is the model's own logits with one layer's bias
moved by hf-posgen's own hook (``posgen cause`` on Falcon: test_alibi_change.py; tiny
random Falcon-ALiBi models on CPU, seconds)."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch
from test_alibi_change import _captures

from posgen.harness import loading
from posgen.harness.cli import main as cli_main
from posgen.harness.decomposition.alibi_change import alibi_moved_logits, alibi_window_rows
from posgen.harness.decomposition.pipeline import decompose_model
from posgen.harness.decomposition.predicted_change import perturbed_positions, predict_windows
from posgen.perturbations.base import registry
from tiny_models import build_model, build_tokenizer

N = 40
HEADS, D = 4, 16  # the tiny Falcon's query heads and head size (one key/value head)


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def _ids(seed: int = 0) -> list[int]:
    return torch.randint(3, 384, (N,), generator=torch.Generator().manual_seed(seed)).tolist()


def _zero_qk(model) -> None:
    """q = k = 0 in every layer (the fused projection: H query heads, one key, one value)."""
    with torch.no_grad():
        for block in model.transformer.h:
            block.self_attention.query_key_value.weight[: (HEADS + 1) * D] = 0.0


def test_falcons_captured_logits_are_qk_plus_its_own_bias():
    """The full logits are q·k·s plus the bias; the bias is Falcon's m_h·j over √d (slopes
    2^(−2h) for 4 heads); the capture leaves the forward alone."""
    model, ids = build_model("falcon_alibi"), _ids()
    with torch.no_grad():
        plain = model(torch.tensor([ids]), use_cache=False).logits
    caps = _captures(model, ids)
    with torch.no_grad():
        assert torch.equal(model(torch.tensor([ids]), use_cache=False).logits, plain)
    slopes = 2.0 ** (-2.0 * torch.arange(1, HEADS + 1))
    causal = torch.ones(N, N, dtype=torch.bool).tril()
    for cap in caps.values():
        full, qk = cap.logits[0], cap.part(include_bias=False).logits[0]
        torch.testing.assert_close(
            full[:, causal], (qk + cap.bias[0])[:, causal], atol=1e-5, rtol=0
        )
        want = slopes[:, None] * torch.arange(float(N)) / math.sqrt(D)
        torch.testing.assert_close(cap.bias[0, :, 0], want, atol=0, rtol=0)


def test_falcon_planted_truth_the_bias_alone_is_exactly_additive(tok):
    model = build_model("falcon_alibi")
    _zero_qk(model)
    table = decompose_model(model, tokenizer=tok, docs=1, tokens=32, progress=False)
    assert set(table["position_family"]) == {"alibi"}
    full, qk = table[table["logit_part"] == "full"], table[table["logit_part"] == "qk"]
    assert len(full) == len(qk) == 2 * HEADS
    np.testing.assert_allclose(full["r_3axis"], 1.0, atol=1e-6)
    np.testing.assert_allclose(qk["logit_std"], 0.0, atol=1e-9)


def test_falcon_fits_differ_with_and_without_the_bias(tok):
    model = build_model("falcon_alibi")
    table = decompose_model(model, tokenizer=tok, docs=1, tokens=32, progress=False)
    full = table[table["logit_part"] == "full"].set_index(["layer", "head"])
    qk = table[table["logit_part"] == "qk"].set_index(["layer", "head"])
    assert (full["r_3axis"] > qk["r_3axis"]).all()  # random q·k: the bias is the structure


def test_the_measured_change_is_the_models_own_logits_with_one_layers_bias_moved():
    """W_π from the captured bias's step is what Falcon computes with hf-posgen's own
    ``layers=ℓ`` hook (up to the per-row constant the bias form drops, and the bfloat16
    rounding of Falcon's products m_h·π_j: exact here, its slopes being powers of 2)."""
    model, ids = build_model("falcon_alibi"), _ids()
    pos = perturbed_positions(ids, registry.parse("position", "swap:0.3"), seed=3)
    assert pos is not None and not torch.equal(pos, torch.arange(N))
    plain = _captures(model, ids)
    causal = torch.ones(N, N, dtype=torch.bool).tril()
    for layer in (0, 1):
        moved = _captures(model, ids, pos, layer)[layer].logits[0].float()
        predicted = alibi_moved_logits(plain[layer], pos)
        step = (plain[layer].bias[0, :, 0, 1] - plain[layer].bias[0, :, 0, 0]).float()
        row_constant = -step[:, None, None] * (pos - torch.arange(N)).float()[None, :, None]
        got = (moved + row_constant)[:, causal]
        torch.testing.assert_close(predicted[:, causal], got, atol=1e-5, rtol=1e-5)
        assert (moved - plain[layer].logits[0]).abs().max() > 1e-2  # the move is seen
    other = _captures(model, ids, pos, 1)[0].logits[0]
    assert torch.equal(other, plain[0].logits[0])  # the layer's inputs are the plain ones


def test_a_falcon_whose_logits_are_its_bias_alone_is_predicted_exactly():
    model = build_model("falcon_alibi")
    _zero_qk(model)
    scheme = [registry.parse("position", "swap:0.3")]
    rows = pd.DataFrame(
        predict_windows(model, [_ids(0), _ids(1)], scheme, 5, False, alibi_window_rows)
    )
    assert len(rows) == 2 * 2 * HEADS and (rows["changed"] > 0).all()
    assert rows["r"].min() > 1 - 1e-6 and rows["share"].min() > 1 - 1e-5
    assert rows["kl_measured_predicted"].abs().max() < 1e-6


def test_a_falcon_asked_to_run_eager_is_refused_before_it_loads(tmp_path, monkeypatch, capsys):
    """Every command that loads Falcon-ALiBi fits its logits, read at its sdpa call."""
    model_dir = tmp_path / "falcon"
    build_model("falcon_alibi").save_pretrained(model_dir)
    build_tokenizer().save_pretrained(model_dir)
    monkeypatch.setattr(loading, "load_model", lambda *a, **k: pytest.fail("weights loaded"))
    capsys.readouterr()  # saving prints its progress
    argv = ["decompose", "--model", str(model_dir), "--out", str(tmp_path / "out")]
    assert cli_main([*argv, "--attn-implementation", "eager", "--device", "cpu"]) == 2
    err = capsys.readouterr().err.strip()
    assert "load it with sdpa, the default" in err and "\n" not in err
    assert not (tmp_path / "out").exists()
