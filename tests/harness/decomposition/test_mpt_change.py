"""The predicted change of a position perturbation on MPT: its bias m_h·(j − n + 1) gives
the step m_h, W_π is what the model computes with hf-posgen's own hook moving only one
layer's bias (its captured logits, and its own attention weights, up to the per-row
constant the form drops), an MPT whose logits are its bias alone is predicted exactly, and
``posgen cause`` runs on MPT end to end (tiny random MPTs, seconds)."""

from __future__ import annotations

import pandas as pd
import pytest
import torch

from posgen.harness.cli import build_parser
from posgen.harness.cli.cause import main as cause_main
from posgen.harness.decomposition.alibi_change import (
    alibi_moved_logits,
    alibi_window_rows,
    bias_step,
)
from posgen.harness.decomposition.predicted_change import perturbed_positions, predict_windows
from posgen.harness.model_side.alibi.capture import capture_alibi_attention
from posgen.harness.model_side.positions.non_rotary import alibi_positions, full_forward_keys
from posgen.harness.position_family import position_family_of
from posgen.perturbations.base import registry
from tiny_models import build_model, build_tokenizer

N = 40
WIDTH = 64  # the tiny MPT's


def _ids(seed: int = 0) -> list[int]:
    return torch.randint(3, 384, (N,), generator=torch.Generator().manual_seed(seed)).tolist()


def _forward(model, ids, positions=None, layer=None) -> tuple[dict, tuple]:
    """(each layer's AlibiCapture, the model's own attention weights) of one forward of
    ``ids``, with ``positions`` in ``layer``'s bias only (hf-posgen's hook) when given."""
    caps = {}
    x = torch.tensor([ids])
    with torch.no_grad(), capture_alibi_attention(model, lambda c: caps.setdefault(c.layer, c)):
        if positions is None:
            return caps, model(x, use_cache=False, output_attentions=True).attentions
        source = full_forward_keys(positions[None])
        with alibi_positions(model, position_family_of(model), source, layers=[layer]):
            return caps, model(x, use_cache=False, output_attentions=True).attentions


def test_the_step_of_mpts_bias_is_its_slope():
    """MPT's bias over n keys is m_h·(j − n + 1): the step beside its zero (the last key)
    is m_h, 2^(−2h) for 4 heads; a bias zero at neither end is refused."""
    caps, _ = _forward(build_model("mpt"), _ids())
    slopes = 2.0 ** (-2.0 * torch.arange(1, 5))
    assert torch.equal(bias_step(caps[0].bias[0, :, 0]), slopes)
    with pytest.raises(RuntimeError, match="zero at neither its first key"):
        bias_step(caps[0].bias[0, :, 0] + 1.0)


def test_the_measured_change_is_the_models_own_logits_with_one_layers_bias_moved():
    model, ids = build_model("mpt_qk"), _ids()
    pos = perturbed_positions(ids, registry.parse("position", "swap:0.3"), seed=3)
    assert pos is not None and not torch.equal(pos, torch.arange(N))
    plain, plain_weights = _forward(model, ids)
    causal = torch.ones(N, N, dtype=torch.bool).tril()
    for layer in (0, 1):
        caps, weights = _forward(model, ids, pos, layer)
        moved = caps[layer].logits[0].float()  # MPT's m_h·(π_j − n + 1)
        predicted = alibi_moved_logits(plain[layer], pos)  # −m_h·(π_i − π_j) form
        step = bias_step(plain[layer].bias[0, :, 0])
        row_constant = -step[:, None, None] * (pos - torch.arange(N)).float()[None, :, None]
        torch.testing.assert_close(predicted, moved + row_constant, atol=1e-5, rtol=1e-5)
        rows = torch.softmax(predicted.masked_fill(~causal, float("-inf")), dim=-1)
        torch.testing.assert_close(rows, weights[layer][0], atol=1e-6, rtol=0)  # its own
        assert not torch.allclose(weights[layer], plain_weights[layer], atol=1e-3)
    # the layer's q and k, hence its inputs, are the plain ones: the other layers unmoved
    other, _ = _forward(model, ids, pos, 1)
    assert torch.equal(other[0].logits[0], plain[0].logits[0])


def test_an_mpt_whose_logits_are_its_bias_alone_is_predicted_exactly():
    model = build_model("mpt_qk")
    with torch.no_grad():  # q = k = 0: every head's logits are its bias, exactly additive
        for block in model.transformer.blocks:
            block.attn.Wqkv.weight[: 2 * WIDTH].zero_()
    swap = [registry.parse("position", "swap:0.3")]
    rows = pd.DataFrame(
        predict_windows(model, [_ids(0), _ids(1)], swap, 5, False, alibi_window_rows)
    )
    assert len(rows) == 2 * model.config.n_layers * model.config.n_heads
    assert (rows["changed"] > 0).all()
    assert rows["r"].min() > 1 - 1e-6 and rows["share"].min() > 1 - 1e-5
    assert rows["kl_measured_predicted"].abs().max() < 1e-6


def test_posgen_cause_runs_on_mpt(tmp_path):
    """Cells through ``logits=``, the ``foreign`` donor from the probe text, and the
    prediction, on a tiny MPT folder."""
    model_dir = tmp_path / "mpt"
    build_model("mpt_qk").save_pretrained(model_dir)
    build_tokenizer().save_pretrained(model_dir)
    out = tmp_path / "cause"
    argv = ["cause", "--model", str(model_dir), "--out", str(out), "--limit", "2"]
    argv += ["--layers", "1", "--forms", "additive", "--controls", "foreign"]
    argv += ["--no-progress", "--positions", "swap:0.2"]
    assert cause_main(build_parser("cause").parse_args(argv)) == 0
    prediction = pd.read_parquet(next(out.glob("*prediction*.parquet")))
    assert set(prediction["layer"]) == {0, 1} and prediction["r"].notna().all()
    assert prediction["share"].notna().all()
    report = (out / "cause.md").read_text()
    assert "swap:0.2" in report and "additive" in report and "foreign" in report
    assert "ALiBi: a layer's positions enter through its bias alone" in report
