"""The decompose runner, its CLI and the companion experiments on tiny models (CPU, seconds)."""

from __future__ import annotations

import argparse

import numpy as np
import pandas as pd
import pytest
import torch

from logit_fit_reference import reference_fit
from posgen.harness.cli import decompose
from posgen.harness.decomposition.experiments import (
    controlled_distance_summary,
    controlled_distance_table,
    qk_pattern_summary,
    qk_pattern_table,
)
from posgen.harness.decomposition.pipeline import decompose_model, head_logit_maps
from posgen.harness.decomposition.probe import probe_token_windows
from posgen.results.tables.decomposition import layer_means, summarize
from tiny_models import build_model, build_tokenizer


@pytest.fixture(scope="module")
def tok():
    return build_tokenizer()


def test_table_shape_bounds_and_orderings(tok):
    model = build_model("llama", seed=0)
    table = decompose_model(model, tokenizer=tok, docs=2, tokens=40, progress=False)
    assert len(table) == 2 * 2 * 4  # docs × layers × heads
    for col in ("r_3axis", "r_2axis", "r_distance_key", "r_row_centred"):
        assert table[col].between(0, 1).all(), col
    assert (table["r_3axis"] >= table["r_2axis"] - 1e-9).all()  # nested models
    assert (table["r_distance_key"] <= table["r_2axis"] + 1e-6).all()  # OLS is optimal
    shares = table[["share_distance", "share_query", "share_key"]].sum(axis=1)
    np.testing.assert_allclose(shares, 1.0, atol=1e-9)
    np.testing.assert_allclose(table["r2"], table["r_3axis"] ** 2)
    # RSS = (1 − r²)·TSS
    np.testing.assert_allclose(
        table["residual_std"] ** 2, (1 - table["r2"]) * table["logit_std"] ** 2, rtol=1e-6
    )
    assert (table["n_entries"] == 40 * 41 // 2).all() and not table["restricted_mask"].any()
    summary = summarize(table)
    assert len(summary) == 1 and summary["heads"].item() == 8
    assert summary["r_3axis_mean"].item() == pytest.approx(table["r_3axis"].mean())
    dominated = (table["share_distance"] > 0.5).mean()
    assert summary["share_distance_dominated"].item() == pytest.approx(dominated)
    assert len(layer_means(table)) == 2


def test_one_head_matches_the_reference_solve(tok):
    model = build_model("qwen2", seed=1)
    table = decompose_model(model, tokenizer=tok, docs=1, tokens=32, progress=False)
    actual, fitted = head_logit_maps(model, tok, tokens=32, layer=1, head=2)
    mask = ~np.isnan(actual)
    ref = reference_fit(np.nan_to_num(actual), mask)
    row = table[(table["layer"] == 1) & (table["head"] == 2)].iloc[0]
    assert abs(row["r_3axis"] - ref["r"]) < 1e-6
    np.testing.assert_allclose(fitted[mask], ref["fitted"], atol=1e-5)


def test_sliding_window_layers_fit_only_their_window(tok):
    table = decompose_model(
        build_model("gemma2", seed=0), tokenizer=tok, docs=1, tokens=24, progress=False
    )
    sliding, full = table[table["layer"] == 0], table[table["layer"] == 1]
    assert sliding["restricted_mask"].all() and not full["restricted_mask"].any()
    window = 8
    assert (sliding["n_entries"] == sum(min(i + 1, window) for i in range(24))).all()
    assert (full["n_entries"] == 24 * 25 // 2).all()


def test_random_init_twin_is_seeded_and_distinct(tok):
    model = build_model("llama", seed=0)
    kw = dict(tokenizer=tok, docs=1, tokens=24, progress=False)
    a = decompose_model(model, random_init=True, seed=3, **kw)
    b = decompose_model(model, random_init=True, seed=3, **kw)
    c = decompose_model(model, random_init=True, seed=4, **kw)
    trained = decompose_model(model, **kw)
    pd.testing.assert_frame_equal(a, b)
    assert not np.allclose(a["r_3axis"], c["r_3axis"])
    assert not np.allclose(a["r_3axis"], trained["r_3axis"])
    assert a["random_init"].all() and not trained["random_init"].any()


def test_probe_windows_are_deterministic_and_exact(tok):
    a = probe_token_windows(tok, docs=3, tokens=50)
    assert a == probe_token_windows(tok, docs=3, tokens=50)
    assert [len(w) for w in a] == [50, 50, 50] and a[0] != a[1]
    with pytest.raises(ValueError, match="lower --docs"):
        probe_token_windows(tok, docs=10**6, tokens=512)


def _parse(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser()
    decompose.configure_parser(parser)
    return parser.parse_args(argv)


def test_cli_writes_table_summary_and_plots(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "out"
    args = _parse(
        [
            "--model",
            str(tiny_model_dir("llama", 0)),
            "--random-init",
            "--docs",
            "1",
            "--tokens",
            "24",
            "--out",
            str(out),
            "--device",
            "cpu",
        ]
    )
    assert decompose.main(args) == 0
    table = pd.read_parquet(out / "heads.parquet")
    assert sorted(table["random_init"].unique()) == [False, True]
    assert len(pd.read_csv(out / "summary.csv")) == 2
    for name in ("heatmap_r_trained_n24.png", "heatmap_r_random_init_n24.png", "head_map.png"):
        assert (out / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert [p.name for p in out.glob(".*")] == [".posgen.lock"]  # no temporary files left
    assert "r_3axis_mean" in capsys.readouterr().out


def test_cli_refuses_bad_input_before_loading():
    with pytest.raises(SystemExit):
        _parse(["--docs", "0"])


def test_controlled_distance_identity_and_qk_pattern(tok):
    model = build_model("llama", seed=0)
    cd = controlled_distance_table(model, tok, tokens=32, docs=1, distances=(1, 8), progress=False)
    true = cd[cd["true_distance"]]
    np.testing.assert_allclose(true["key_stability"], 1.0, atol=1e-6)  # same positions
    moved = cd[cd["distance"] == 1]
    assert len(moved) == 8 and (moved["key_stability"] < 1 - 1e-6).any()
    summary = controlled_distance_summary(cd)
    assert set(summary["distance"]) == {1, 8, int(true["distance"].iloc[0])}
    qk = qk_pattern_table(model, tok, tokens=32, docs=1, progress=False)
    assert len(qk) == 2 * 4 * 8  # layers × heads × (head_dim / 2) subspaces
    for col in ("key_phase_concentration", "query_phase_concentration"):
        assert qk[col].between(0, 1 + 1e-9).all()
    wl = qk_pattern_summary(qk)["wavelength"].to_numpy()
    assert wl[0] == pytest.approx(2 * np.pi) and np.all(np.diff(wl) > 0)  # theta^(2m/d)


@pytest.mark.slow
def test_embedded_model_decomposes_above_chance(embedded_model_dir):
    table = decompose_model(str(embedded_model_dir), docs=1, tokens=64, progress=False)
    assert len(table) == 30 * 9
    assert (table["r_3axis"] > table["chance_r"]).mean() > 0.9
    assert torch.isfinite(torch.tensor(table["r_distance_key"].to_numpy())).all()


def test_cli_modules_import_light():
    import subprocess
    import sys

    code = (
        "import sys, posgen.harness.cli.decompose, posgen.harness.decomposition.probe, "
        "posgen.results.report.decomposition_plots; "
        "print(sorted(m for m in ('torch', 'transformers', 'pandas', 'matplotlib') "
        "if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


@pytest.mark.parametrize(
    "argv",
    [
        ["--length", "lambda:4"],  # Λ needs GLOBAL,WINDOW
        ["--length", "lambda:-1,C"],
        ["--length", "bogus:3"],
        ["--length", "scale:0"],
    ],
)
def test_cli_refuses_bad_length_input_before_loading(argv, capsys, tmp_path):
    out = tmp_path / "out"
    assert decompose.main(_parse([*argv, "--out", str(out)])) == 2  # embedded: not converted
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("posgen decompose: --length"), err
    assert not out.exists()


def test_cli_refuses_a_trained_context_below_one_when_parsing(capsys):
    with pytest.raises(SystemExit) as exc:
        _parse(["--trained-context", "0"])
    assert exc.value.code == 2 and "--trained-context" in capsys.readouterr().err


def test_cli_length_scheme_past_a_trained_context(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "out"
    model = str(tiny_model_dir("llama", 0))
    argv = ["--model", model, "--docs", "1", "--tokens", "40", "--device", "cpu"]
    args = _parse([*argv, "--length", "scale:2", "--trained-context", "24", "--out", str(out)])
    assert decompose.main(args) == 0
    table = pd.read_parquet(out / "heads.parquet")
    assert (table["length"] == "scale:2.0").all() and (table["context"] == 24).all()
    for col in ("r_3axis_before_context", "r_3axis_past_context"):
        assert table[col].between(0, 1).all(), col
    assert (table["a_trend_rms_past"] >= 0).all() and (table["a_trend_rms_before"] >= 0).all()
    layers = pd.read_csv(out / "layers.csv")
    assert "r_3axis_past_context" in layers.columns and len(layers) == 2
    assert "past C: query rows i >= C" in capsys.readouterr().out
    plain = _parse([*argv, "--trained-context", "24", "--out", str(tmp_path / "plain")])
    assert decompose.main(plain) == 0
    as_trained = pd.read_parquet(tmp_path / "plain" / "heads.parquet")
    assert not np.allclose(as_trained["r_3axis_past_context"], table["r_3axis_past_context"])
