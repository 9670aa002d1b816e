"""Sums streamed a block of query rows at a time: equal to the whole-tensor sums, on any
block size and mask; the decomposition never asks the capture for whole logits."""

from __future__ import annotations

import pytest
import torch

from posgen.harness.additive_fit.logit_fit import (
    FitLayout,
    FitOptions,
    LayoutCache,
    diagonal_and_column_sums,
    head_sums,
)
from posgen.harness.decomposition import block_sums, streaming_fit
from posgen.harness.decomposition.block_sums import (
    streamed_diagonal_and_column_sums,
    streamed_head_sums,
)
from posgen.harness.decomposition.pipeline import decompose_model
from posgen.harness.model_side.logits import capture
from tiny_models import build_model, build_tokenizer


def _layouts(n: int):
    i = torch.arange(n)
    window = (i[:, None] - i[None, :] >= 0) & (i[:, None] - i[None, :] < 5)
    yield LayoutCache().causal(n, FitOptions(include_diagonal=False, sink_keys=2))
    yield FitLayout.from_mask(FitOptions(sink_keys=1).apply(window))


@pytest.mark.parametrize("elements", [1, 7 * 3 * 37, 2**23])  # one row, odd blocks, whole
def test_streamed_sums_equal_whole_sums(monkeypatch, elements):
    monkeypatch.setattr(block_sums, "BLOCK_ELEMENTS", elements)
    n, heads = 37, 3
    w = 50.0 + torch.randn(heads, n, n, generator=torch.Generator().manual_seed(0))

    def source(start, stop, width):
        return w[:, start:stop, :width].clone()

    for layout in _layouts(n):
        ref = head_sums(w.double(), layout)
        got = streamed_head_sums(source, heads, layout)
        for name in ("mean", "diag", "rows", "cols", "tss", "tss_row_centred"):
            torch.testing.assert_close(getattr(got, name), getattr(ref, name), rtol=1e-5, atol=1e-4)
        for ref_t, got_t in zip(
            diagonal_and_column_sums(w.double(), layout),
            streamed_diagonal_and_column_sums(source, heads, layout),
            strict=True,
        ):
            torch.testing.assert_close(got_t, ref_t, rtol=1e-5, atol=1e-3)


def test_decomposition_never_holds_whole_logits_and_both_paths_agree(monkeypatch):
    """The bilinear path (q, k sums) and the block path (logit blocks) give one table."""
    tok = build_tokenizer()
    model = build_model("llama", seed=0)

    def run():
        return decompose_model(model, tokenizer=tok, docs=1, tokens=48, progress=False, context=30)

    bilinear = run()

    def refuse(self):
        raise AssertionError("whole [B, H, n, n] logits requested")

    monkeypatch.setattr(capture.LayerCapture, "logits", property(refuse))
    monkeypatch.setattr(streaming_fit, "_bilinear_sums", streaming_fit._block_sums)
    monkeypatch.setattr(block_sums, "BLOCK_ELEMENTS", 4 * 48 * 5)  # 5 rows per block
    monkeypatch.setattr(capture, "ATTENTION_BLOCK_BYTES", 4 * 4 * 48 * 7)  # 7 rows
    blocked = run()
    cols = ["r_3axis", "r_2axis", "r_distance_key", "r_row_centred", "logit_std"]
    cols += ["r_3axis_before_context", "r_3axis_past_context", "a_trend_rms_past"]
    for col in cols:
        torch.testing.assert_close(
            torch.tensor(blocked[col].values), torch.tensor(bilinear[col].values), rtol=0, atol=1e-6
        )
