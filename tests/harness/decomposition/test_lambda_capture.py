"""The capture inside Λ attention: the forward is exactly Λ's, the consumer gets Λ's local
band (q·k of the model's own post-RoPE q, k), and the decomposition fits that band."""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
import pytest
import torch

from posgen.harness.additive_fit.fit_layout import band_mask
from posgen.harness.additive_fit.logit_fit_reference import reference_fit
from posgen.harness.cli import decompose
from posgen.harness.decomposition.pipeline import decompose_model, head_logit_maps
from posgen.harness.model_side.attention.lambda_attention import lambda_attention
from posgen.harness.model_side.logits.capture import capture_forward
from posgen.perturbations.length import LengthLambda
from tiny_models import build_short_context_model, build_tokenizer

SCHEME = LengthLambda(n_global=2, window=16)


def _lambda_forward(scheme: LengthLambda = SCHEME):
    def forward_context(model, ids):
        return lambda_attention(model, scheme)

    return forward_context


@pytest.mark.parametrize("arch", ["llama", "qwen2"])  # qwen2: grouped KV heads
def test_captured_forward_is_the_lambda_forward(arch):
    model = build_short_context_model(arch, max_positions=64)
    n = 48
    ids = torch.randint(3, 384, (n,), generator=torch.Generator().manual_seed(1)).tolist()
    outputs = {}

    def keep_output(module, args, output):
        outputs.setdefault("run", []).append(output[0].clone())

    handle = model.base_model.norm.register_forward_hook(keep_output)  # the last hidden state
    seen = {}

    def consumer(cap) -> None:
        seen[cap.layer] = (cap.window, cap.attended[0, 0].clone())
        w = cap.logit_block(0, n)[0]
        q, k = cap.query[0].float(), cap.key[0].float()
        torch.testing.assert_close(w, q @ k.transpose(1, 2) * cap.scaling)  # the model's q·k

    try:
        with torch.no_grad(), lambda_attention(model, SCHEME):
            model(torch.tensor([ids]), use_cache=False)
            plain_lambda = outputs.pop("run")[0]
            capture_forward(model, ids, consumer)
            captured = outputs.pop("run")[0]
            capture_forward(model, ids[:16], lambda cap: seen.update(short=cap.window))
            outputs.pop("run")
        with torch.no_grad():
            model(torch.tensor([ids]), use_cache=False)
            no_lambda = outputs.pop("run")[0]
    finally:
        handle.remove()
    assert torch.equal(captured, plain_lambda)  # the same Λ function computed the outputs
    assert not torch.allclose(no_lambda, plain_lambda, atol=1e-3)  # Λ changes the forward
    assert len(seen) == model.config.num_hidden_layers + 1
    for layer in range(model.config.num_hidden_layers):
        window, attended = seen[layer]
        assert window == SCHEME.window
        assert torch.equal(attended, band_mask(n, SCHEME.window))  # global keys left out
    assert seen["short"] is None  # n ≤ W: plain causal, as without Λ


def test_decompose_under_lambda_fits_the_band():
    tok = build_tokenizer()
    model = build_short_context_model("llama", max_positions=64)
    n, context = 40, 24
    table = decompose_model(
        model,
        tokenizer=tok,
        docs=1,
        tokens=n,
        progress=False,
        length=SCHEME,
        context=context,
        forward_context=_lambda_forward(),
    )
    band_entries = int(band_mask(n, SCHEME.window).sum())
    assert (table["fit_mask"] == "lambda-band:16").all() and table["restricted_mask"].all()
    assert (table["n_entries"] == band_entries).all() and (table["length"] == "lambda:2,16").all()
    for col in ("r_3axis", "r_3axis_before_context", "r_3axis_past_context"):
        assert table[col].between(0, 1).all(), col
    assert table["a_trend_rms_past"].isna().all()  # W ≤ C: no fitted distance past C
    assert (table["a_trend_rms_before"] >= 0).all()
    actual, fitted = head_logit_maps(
        model, tok, tokens=n, layer=1, head=2, forward_context=_lambda_forward()
    )
    mask = ~np.isnan(actual)
    assert np.array_equal(mask, band_mask(n, SCHEME.window).numpy())
    ref = reference_fit(np.nan_to_num(actual), mask)
    row = table[(table["layer"] == 1) & (table["head"] == 2)].iloc[0]
    assert abs(row["r_3axis"] - ref["r"]) < 1e-6
    np.testing.assert_allclose(fitted[mask], ref["fitted"], atol=1e-5)
    plain = decompose_model(model, tokenizer=tok, docs=1, tokens=n, progress=False)
    assert (plain["fit_mask"] == "causal").all() and (plain["n_entries"] == n * (n + 1) // 2).all()


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    decompose.configure_parser(parser)
    return parser.parse_args(argv)


def test_cli_runs_lambda_with_the_trained_context_as_window(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "out"
    model = str(tiny_model_dir("llama", 0))
    argv = ["--model", model, "--docs", "1", "--tokens", "40", "--device", "cpu"]
    args = _parse([*argv, "--length", "lambda:2,C", "--trained-context", "24", "--out", str(out)])
    assert decompose.main(args) == 0
    table = pd.read_parquet(out / "heads.parquet")
    assert (table["length"] == "lambda:2,24").all() and (
        table["fit_mask"] == "lambda-band:24"
    ).all()
    assert table["r_3axis_past_context"].between(0, 1).all()
    printed = capsys.readouterr().out
    assert "past C: query rows i >= C" in printed
    assert "fitted under lambda:2,24: lambda-band:24 (Lambda's global keys not fitted)" in printed


def test_cli_refuses_lambda_on_a_sliding_window_model_before_loading(
    tiny_model_dir, tmp_path, monkeypatch, capsys
):
    from posgen.harness.decomposition import pipeline

    def refuse(*a, **k):
        raise AssertionError("the model was loaded")

    model = str(tiny_model_dir("gemma2", 0))  # soft-capping and sliding-window layers
    capsys.readouterr()
    monkeypatch.setattr(pipeline, "load_model", refuse)
    args = _parse(["--model", model, "--length", "lambda:4,C", "--out", str(tmp_path / "out")])
    assert decompose.main(args) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--length lambda:4," in err, err
    assert "does not support logit soft-capping" in err, err
    assert not (tmp_path / "out").exists()


def test_config_refusal_names_what_lambda_cannot_run():
    from types import SimpleNamespace as Config

    from posgen.harness.model_side.attention.lambda_attention import config_refusal

    assert config_refusal(Config(max_position_embeddings=64)) is None
    sliding = "does not combine with sliding-window layers"
    assert sliding in config_refusal(Config(layer_types=["sliding_attention", "full_attention"]))
    assert sliding in config_refusal(Config(sliding_window=4096))  # Mistral: every layer
    assert config_refusal(Config(sliding_window=4096, use_sliding_window=False)) is None
    assert config_refusal(Config(sliding_window=4096, layer_types=["full_attention"])) is None
    assert "soft-capping" in config_refusal(Config(attn_logit_softcapping=50.0))
