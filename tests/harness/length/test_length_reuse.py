"""The shared prefix (posgen.harness.length.reuse): a scheme's suffix continued from the
prefix's KV cache gives the whole forward's per-position NLL and drift sums."""

from __future__ import annotations

import json
from types import SimpleNamespace

import numpy as np
import pytest
import torch
from tests.tiny_models import build_short_context_model
from transformers import DynamicCache

from door_forwards import document
from posgen.harness.cli import main as cli_main
from posgen.harness.length import reuse
from posgen.harness.length.drift import drift_capture
from posgen.harness.length.nll import position_nll
from posgen.harness.length.reuse import (
    causal_offset_mask,
    run_prefix,
    run_suffix,
    shared_length,
)
from posgen.harness.model_side.attention.lambda_attention import lambda_attention
from posgen.perturbations.length import LengthLambda, LengthNone
from posgen.results.scores.length import result_path

C, N = 64, 150
CONFIG = SimpleNamespace(
    seed=1234, block_size=16, chunk=32, trained_context=C, bucket_width=16, n_buckets=10
)


@pytest.fixture(scope="module")
def model():
    return build_short_context_model("llama", max_positions=C)


def _ids(n: int = N) -> torch.Tensor:
    return torch.randint(3, 384, (1, n), generator=torch.Generator().manual_seed(7))


def _whole(model, ids, scheme):
    with (
        document(model, ids, scheme, None, CONFIG.seed, CONFIG.block_size),
        drift_capture(model, C, CONFIG.bucket_width, CONFIG.n_buckets) as drift,
    ):
        nll = position_nll(model, ids, CONFIG.chunk)
    return nll, drift[-1]


def _close(a, b) -> bool:
    nll_a, drift_a = a
    nll_b, drift_b = b
    da, db = drift_a.to_dict(), drift_b.to_dict()
    same = np.allclose(nll_a[1:], nll_b[1:], rtol=1e-5, atol=1e-5)
    for k in ("cos_sum", "log_norm_sum", "region_cos", "region_log_norm"):
        same = same and np.allclose(da[k], db[k], rtol=1e-6, atol=1e-5)
    return bool(same and da["count"] == db["count"])


def test_shared_length_is_c_or_the_smallest_window():
    assert shared_length([LengthNone(), LengthLambda(4, 64)], C) == C
    assert shared_length([LengthNone(), LengthLambda(4, 100), LengthLambda(2, 24)], C) == 24


@pytest.mark.parametrize(
    "schemes", [[LengthNone(), LengthLambda(2, C)], [LengthNone(), LengthLambda(2, 24)]]
)
@pytest.mark.parametrize("suffix_chunk", [20, 1024])
def test_suffix_after_the_shared_prefix_equals_the_whole_forward(
    model, schemes, suffix_chunk, monkeypatch
):
    """In chunks of 20 the drift's reference [C/2, C) completes inside the suffix (W = 24)
    and later chunks are reduced as they come."""
    monkeypatch.setattr(reuse, "SUFFIX_CHUNK", suffix_chunk)
    ids = _ids()
    p = shared_length(schemes, C)
    prefix = run_prefix(model, ids, p, CONFIG.chunk, [s.to_string() for s in schemes], C)
    assert np.isnan(prefix.nll[p + 1 :]).all() and np.isfinite(prefix.nll[1 : p + 1]).all()
    for scheme in schemes:
        nll, drift, _ = run_suffix(model, ids, prefix, scheme, CONFIG)
        assert _close((nll, drift), _whole(model, ids, scheme)), scheme.to_string()
    assert prefix.cache.get_seq_length() == p  # each suffix ran on its own copy


def test_a_prefix_longer_than_the_window_breaks_equality(model):
    """A wrong P (C for a Λ whose W < C) gives other numbers: the test can fail."""
    ids, scheme = _ids(), LengthLambda(2, 24)
    prefix = run_prefix(model, ids, C, CONFIG.chunk, [scheme.to_string()], C)
    assert not _close(
        run_suffix(model, ids, prefix, scheme, CONFIG)[:2], _whole(model, ids, scheme)
    )


@pytest.mark.parametrize("cached", [10, 24, 40, 100])
def test_lambda_queries_after_a_cache_equal_their_whole_forward_rows(model, cached):
    """Λ with q_len < kv_len (query r is token kv_len − q_len + r) gives the rows the whole
    forward gives, whatever the cache length relative to W = 24."""
    ids, scheme = _ids(), LengthLambda(3, 24)
    with torch.no_grad(), lambda_attention(model, scheme, block_size=16):
        whole = model.base_model(input_ids=ids).last_hidden_state
        cache = DynamicCache()
        first = model.base_model(input_ids=ids[:, :cached], cache=cache, use_cache=True)
        mask = causal_offset_mask(N - cached, N, whole)
        rest = model.base_model(input_ids=ids[:, cached:], cache=cache, attention_mask=mask)
    got = torch.cat([first.last_hidden_state, rest.last_hidden_state], dim=1)
    torch.testing.assert_close(got, whole, rtol=1e-5, atol=1e-5)


def test_lambda_after_a_cache_refuses_a_padding_mask(model):
    ids = _ids(60)
    with torch.no_grad(), lambda_attention(model, LengthLambda(2, 16)):
        cache = DynamicCache()
        model.base_model(input_ids=ids[:, :30], cache=cache, use_cache=True)
        mask = causal_offset_mask(30, 60, torch.zeros(1))
        mask[..., 3] = float("-inf")  # a padded key
        with pytest.raises(RuntimeError, match="attention mask"):
            model.base_model(input_ids=ids[:, 30:], cache=cache, attention_mask=mask)


def _run(tiny_path, out):
    args = ["length", "--model", str(tiny_path), "--schemes", "none;lambda:2,32;scale:2"]
    return cli_main([*args, "--documents", "1", "--bucket-width", "16", "--out", str(out)])


def test_records_say_what_their_seconds_cover_and_a_resume_recomputes_the_prefix(
    tiny_path, tmp_path
):
    out = tmp_path / "run"
    assert _run(tiny_path, out) == 0
    doc = json.loads((out / "config.json").read_text())["config"]["documents"][0]
    none, lam, scale_path = (result_path(out, s, doc) for s in ("none", "lambda:2,32", "scale:2.0"))
    first = json.loads(none.read_text()), json.loads(lam.read_text())
    for record in first:
        assert record["prefix_tokens"] == 32 and record["seconds_cover"].startswith("suffix [32,")
        assert record["prefix_shared_by"] == ["none", "lambda:2,32"]
    scale = json.loads(scale_path.read_text())
    assert scale["seconds_cover"] == "whole" and "prefix_tokens" not in scale
    lam.unlink()  # none done, lambda not: the prefix is computed again for lambda alone
    assert _run(tiny_path, out) == 0
    again = json.loads(lam.read_text())
    assert again["prefix_shared_by"] == ["lambda:2,32"]
    np.testing.assert_allclose(again["nll_sum"], first[1]["nll_sum"], rtol=1e-9)
