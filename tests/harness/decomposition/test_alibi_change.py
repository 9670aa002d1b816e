"""The predicted change of a position perturbation on ALiBi (BLOOM): the measured change
equals what the model computes with only one layer's bias moved (up to the per-row
constant BLOOM's form drops), a BLOOM whose logits are its bias alone is predicted
exactly, and ``posgen cause`` runs on BLOOM end to end (tiny random BLOOMs, seconds)."""

from __future__ import annotations

import math

import pandas as pd
import pytest
import torch

from posgen.harness.cli import build_parser
from posgen.harness.cli.cause import main as cause_main
from posgen.harness.decomposition.alibi_change import alibi_moved_logits, alibi_window_rows
from posgen.harness.decomposition.predicted_change import perturbed_positions, predict_windows
from posgen.harness.model_side.alibi.capture import capture_alibi_attention
from posgen.harness.model_side.positions.non_rotary import alibi_positions, full_forward_keys
from posgen.harness.position_family import position_family_of
from posgen.perturbations.base import registry
from tiny_models import build_model, build_tokenizer

N = 40
HEADS = 4  # the tiny BLOOM's


def _ids(seed: int = 0) -> list[int]:
    return torch.randint(3, 384, (N,), generator=torch.Generator().manual_seed(seed)).tolist()


def _captures(model, ids, positions=None, layer=None) -> dict:
    """Each layer's AlibiCapture of one forward of ``ids``, with ``positions`` in
    ``layer``'s bias only (hf-posgen's own ALiBi hook) when given."""
    caps = {}
    x = torch.tensor([ids])
    with torch.no_grad(), capture_alibi_attention(model, lambda c: caps.setdefault(c.layer, c)):
        if positions is None:
            model(x, use_cache=False)
        else:
            family = position_family_of(model)
            source = full_forward_keys(positions[None])
            with alibi_positions(model, family, source, layers=[layer]):
                model(x, use_cache=False)
    return caps


def test_the_measured_change_is_the_models_own_logits_with_one_layers_bias_moved():
    model, ids = build_model("bloom_qk"), _ids()
    scheme = registry.parse("position", "swap:0.3")
    pos = perturbed_positions(ids, scheme, seed=3)
    assert pos is not None and not torch.equal(pos, torch.arange(N))
    plain = _captures(model, ids)
    for layer in (0, 1):
        moved = _captures(model, ids, pos, layer)[layer].logits[0].float()  # BLOOM's m_h·π_j
        predicted = alibi_moved_logits(plain[layer], pos)  # −β·m_h·(π_i − π_j) form
        step = (plain[layer].bias[0, :, 0, 1] - plain[layer].bias[0, :, 0, 0]).float()
        row_constant = -step[:, None, None] * (pos - torch.arange(N)).float()[None, :, None]
        torch.testing.assert_close(predicted, moved + row_constant, atol=1e-5, rtol=1e-5)
    # the layer's q and k, hence its inputs, are the plain ones: the other layers unmoved
    other = _captures(model, ids, pos, 1)[0].logits[0]
    assert torch.equal(other, plain[0].logits[0])


def test_a_bloom_whose_logits_are_its_bias_alone_is_predicted_exactly():
    model = build_model("bloom_qk")
    d = model.config.hidden_size // HEADS
    with torch.no_grad():  # q = 0: every head's logits are its bias, exactly additive
        for block in model.transformer.h:
            fused = block.self_attention.query_key_value
            fused.weight.view(HEADS, 3, d, -1)[:, 0] = 0.0
            fused.bias.view(HEADS, 3, d)[:, 0] = 0.0
    rows = pd.DataFrame(
        predict_windows(
            model,
            [_ids(0), _ids(1)],
            [registry.parse("position", "swap:0.3")],
            5,
            False,
            alibi_window_rows,
        )
    )
    assert len(rows) == 2 * model.config.n_layer * HEADS
    assert (rows["changed"] > 0).all()
    assert rows["r"].min() > 1 - 1e-6 and rows["share"].min() > 1 - 1e-5
    assert rows["kl_measured_predicted"].abs().max() < 1e-6


def test_on_a_bloom_whose_qk_matters_the_prediction_misses_what_qk_made_of_distance():
    rows = pd.DataFrame(
        predict_windows(
            build_model("bloom_qk"),
            [_ids(2)],
            [registry.parse("position", "swap:0.3")],
            5,
            window_rows=alibi_window_rows,
        )
    )
    assert rows["r"].notna().all() and (rows["r"] < 1 - 1e-4).any()
    assert rows["kl_measured_plain"].min() > 0


@pytest.mark.parametrize("arch", ["bloom_qk", "falcon_alibi"])
def test_posgen_cause_runs_on_bloom_and_falcon(tmp_path, capsys, arch):
    model_dir = tmp_path / arch
    build_model(arch).save_pretrained(model_dir)
    build_tokenizer().save_pretrained(model_dir)
    out = tmp_path / "cause"
    argv = ["cause", "--model", str(model_dir), "--out", str(out), "--limit", "2"]
    argv += ["--layers", "0", "--forms", "additive", "--controls", "none", "--no-progress"]
    assert cause_main(build_parser("cause").parse_args([*argv, "--positions", "swap:0.2"])) == 0
    prediction = pd.read_parquet(next(out.glob("*prediction*.parquet")))
    assert set(prediction["layer"]) == {0, 1} and prediction["r"].notna().any()
    report = (out / "cause.md").read_text()
    assert "swap:0.2" in report and "additive" in report
    assert "ALiBi: a layer's positions enter through its bias alone" in report
    assert not math.isnan(float(prediction["share"].mean()))
