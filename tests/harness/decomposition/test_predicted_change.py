"""The predicted logit change of a position perturbation: planted truth (exactly additive
logits: r = 1; a planted position–content interaction: the error is the interaction's
own change), the figures against brute force, and the measured change against the
``layers=`` forward it stands for."""

from __future__ import annotations

import math

import numpy as np
import pandas as pd
import pytest
import torch

from planted_models import block_window, planted_model
from posgen.harness.additive_fit.logit_fit import FitOptions, LayoutCache, fit_heads
from posgen.harness.decomposition.predicted_change import (
    change_figures,
    perturbed_positions,
    predict_windows,
)
from posgen.harness.model_side.logits.capture import capture_forward
from posgen.harness.model_side.positions.layers import TWIN_ROTATIONS, layer_positions
from posgen.perturbations.base import registry
from posgen.results.scores.cause import r_and_share
from tiny_models import build_model

N = 64
SWAP = registry.parse("position", "swap:0.2")


def test_an_exactly_additive_model_has_its_change_predicted_exactly():
    rows = predict_windows(planted_model(0.0), [block_window(N)], [SWAP], seed=1234)
    assert len(rows) == 4  # one layer, four heads
    for row in rows:
        assert row["changed"] > 50 and row["covered"] < row["entries"]
        assert row["r"] > 1 - 1e-6 and abs(row["share"] - 1) < 1e-5
        assert row["kl_measured_predicted"] < 1e-7 < row["kl_measured_plain"]
        assert row["kl_predicted_plain"] == pytest.approx(row["kl_measured_plain"], rel=1e-4)


def _twin_logits(model, ids, pos) -> tuple[torch.Tensor, torch.Tensor]:
    """(W, W_π) of layer 0 from the capture inside the twin rotation."""
    kept = {}

    def keep(cap):
        if cap.layer != 0:
            return
        q, k = TWIN_ROTATIONS.get().pop(cap.layer)
        k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)  # grouped KV heads
        kept["w"] = cap.logits[0].double()
        kept["moved"] = (torch.matmul(q[0].float(), k[0].float().mT) * cap.scaling).double()

    with layer_positions(model, pos[None], [0], split_heads=True):
        capture_forward(model, ids, keep)
    return kept["w"], kept["moved"]


@pytest.mark.parametrize("strength", [0.3, 1.0])
def test_a_planted_interaction_is_missed_by_exactly_its_own_change(strength):
    """W_λ = A + I. The fit is linear and A is exactly additive, so the predicted change
    is ΔA + Δa_I with a_I the distance term of fit(I): the error of the prediction on the
    changed entries is ΔI − Δa_I, computed here from the planted parts alone."""
    ids = block_window(N)
    pos = perturbed_positions(ids, SWAP, 1234)
    base, planted = planted_model(0.0), planted_model(strength)
    (w0, w0m), (wl, wlm) = _twin_logits(base, ids, pos), _twin_logits(planted, ids, pos)
    interaction, moved_interaction = wl - w0, wlm - w0m
    layout = LayoutCache().causal(N, FitOptions())
    a_i = fit_heads(interaction, layout).a  # [H, n]
    i = torch.arange(N)
    dist, moved = i[:, None] - i[None, :], pos[:, None] - pos[None, :]
    changed = layout.mask & (moved >= 0) & (moved != dist)
    error = (moved_interaction - interaction) - (
        a_i[:, moved.clamp(min=0)] - a_i[:, dist.clamp(min=0)]
    )
    planted_miss = (error**2)[:, changed].sum(-1)
    rows = predict_windows(planted, [ids], [SWAP], seed=1234)
    for h, row in enumerate(rows):
        miss = row["sum_meas2"] - 2 * row["sum_cross"] + row["sum_pred2"]  # Σ (m − p)²
        assert planted_miss[h] > 1e-3 * row["sum_meas2"]  # the interaction is not negligible
        assert miss == pytest.approx(float(planted_miss[h]), rel=1e-3)
        assert row["r"] < 1 - 1e-4


def test_the_figures_match_brute_force():
    gen = torch.Generator().manual_seed(5)
    n, p = 12, 3
    w, moved_w = torch.randn(p, n, n, generator=gen), torch.randn(p, n, n, generator=gen)
    a = torch.randn(p, n, generator=gen).double()
    a[1, 7] = math.nan  # an unfitted distance
    fitted = torch.ones(n, n, dtype=torch.bool).tril()
    pos = torch.tensor([0, 1, 5, 3, 4, 2, 6, 7, 11, 9, 10, 8])
    got = change_figures(w, moved_w, a, fitted, pos)
    for h in range(p):
        pairs, rows = [], {}
        for i in range(n):
            for j in range(i + 1):
                d, dm = i - j, int(pos[i] - pos[j])
                if dm < 0 or not math.isfinite(float(a[h, dm] - a[h, d])):
                    continue
                pred = float(a[h, dm] - a[h, d])
                rows.setdefault(i, []).append((j, pred))
                if dm != d:
                    pairs.append((pred, float(moved_w[h, i, j] - w[h, i, j])))
        pp, mm = np.array(pairs).T
        sums = {
            "changed": len(pp),
            "sum_pred": pp.sum(),
            "sum_meas": mm.sum(),
            "sum_pred2": (pp**2).sum(),
            "sum_meas2": (mm**2).sum(),
            "sum_cross": (pp * mm).sum(),
        }
        for k, v in sums.items():
            assert float(got[k][h]) == pytest.approx(v, rel=1e-5, abs=1e-6), k
        assert r_and_share(sums)["r"] == pytest.approx(np.corrcoef(pp, mm)[0, 1], rel=1e-6)
        kls = []
        for i, entries in rows.items():
            js = [j for j, _ in entries]
            meas = torch.log_softmax(moved_w[h, i, js].double(), 0)
            pred = torch.log_softmax(
                w[h, i, js].double() + torch.tensor([x for _, x in entries]), 0
            )
            kls.append(float((meas.exp() * (meas - pred)).sum()))
        assert float(got["kl_measured_predicted"][h]) == pytest.approx(np.mean(kls), rel=1e-4)


def test_the_measured_change_is_the_logits_of_the_layers_cell():
    """W_π of layer ℓ equals what the model computes in layer ℓ with positions moved in
    that layer alone (hf-posgen layers=ℓ), bit for bit."""
    model = build_model("llama")
    ids = list(range(5, 45))
    pos = perturbed_positions(ids, SWAP, 7)
    _, moved = _twin_logits(model, ids, pos)
    seen = {}
    with layer_positions(model, pos[None], [0]):
        capture_forward(model, ids, lambda cap: seen.update({cap.layer: cap.logits[0]}))
    torch.testing.assert_close(moved, seen[0].double(), atol=1e-6, rtol=0)


def test_non_integer_positions_are_refused():
    with pytest.raises(ValueError, match="non-integer"):
        perturbed_positions(list(range(20)), registry.parse("position", "scale:0.5"), 0)
    assert perturbed_positions(list(range(20)), registry.parse("position", "swap:0"), 0) is None


@pytest.mark.parametrize("arch", ["llama", "qwen2", "gpt_neox"])
def test_the_strips_give_the_dense_figures(arch):
    """Causal layers take the strips (moved rows and columns only, fused normalisers, sums
    from q and k); the dense [H, n, n] maps are their reference."""
    from posgen.harness.decomposition.predicted_change import ChangePredictor

    model = build_model(arch)
    with torch.no_grad():  # sharper attention than the tiny init, so the KLs are not ~0
        for m in model.modules():
            for name in ("q_proj", "k_proj", "query_key_value"):
                if hasattr(m, name):
                    getattr(m, name).weight.mul_(6.0)
    ids = list(range(5, 70))
    pos = perturbed_positions(ids, SWAP, 3)
    got = {}
    for dense in (False, True):
        predictor = ChangePredictor(pos, dense=dense)
        with layer_positions(model, pos[None], [0, 1], split_heads=True):
            capture_forward(model, ids, predictor)
        got[dense] = pd.DataFrame(predictor.rows)
    strips, dense = got[False], got[True]
    assert dense["kl_measured_plain"].min() > 1e-4
    for column in ("changed", "covered", "entries"):
        assert (strips[column] == dense[column]).all()
    for column in ("sum_pred", "sum_meas", "sum_pred2", "sum_meas2", "sum_cross", "r", "share"):
        np.testing.assert_allclose(strips[column], dense[column], rtol=2e-4, atol=1e-6)
    for column in ("kl_measured_predicted", "kl_measured_plain", "kl_predicted_plain"):
        np.testing.assert_allclose(strips[column], dense[column], rtol=1e-3, atol=1e-7)


@pytest.mark.slow
def test_the_embedded_model_strips_equal_the_dense_maps(embedded_model_dir):
    """On the real SmolLM2-135M (30 layers, grouped KV heads), one 96-token window: the
    strips give the dense figures in every layer."""
    from posgen.harness.decomposition.pipeline import load_model
    from posgen.harness.decomposition.predicted_change import ChangePredictor
    from posgen.harness.decomposition.probe import probe_token_windows

    model, tok = load_model(str(embedded_model_dir), device="cpu")
    ids = probe_token_windows(tok, docs=1, tokens=96)[0]
    pos = perturbed_positions(ids, SWAP, 1234)
    got = {}
    for dense in (False, True):
        predictor = ChangePredictor(pos, dense=dense)
        with layer_positions(model, pos[None], list(range(30)), split_heads=True):
            capture_forward(model, ids, predictor)
        got[dense] = pd.DataFrame(predictor.rows)
    for column in ("r", "share", "kl_measured_predicted", "kl_predicted_plain"):
        np.testing.assert_allclose(got[False][column], got[True][column], rtol=2e-3, atol=1e-6)
