"""Λ attention: the blocked implementation equals a dense reference built from the
model's eager attention on explicitly rotated queries and keys."""

from __future__ import annotations

import sys

import pytest
import torch
from tests.tiny_models import build_short_context_model
from transformers import AttentionInterface, AttentionMaskInterface
from transformers.masking_utils import ALL_MASK_ATTENTION_FUNCTIONS

from posgen.harness.model_side.attention.lambda_attention import lambda_attention
from posgen.perturbations.length import LengthLambda

REF = "posgen_test_lambda_reference"


def _reference_forward(module, query, key, value, attention_mask, scaling=None, **kwargs):
    """Dense LM-Infinite Λ attention from the pre-RoPE projections: queries
    ``[R(i)q_i | R(W)q_i]`` against keys ``[R(j)k_j | 0]`` (every j) and ``[0 | R(0)k_j]``
    (j < G), one n × (n+G) additive mask, the model's eager attention."""
    cfg = _REFERENCE_CONFIG
    hidden = module._posgen_test_hidden
    modeling = sys.modules[type(module).__module__]
    b, n, _ = hidden.shape
    shape = (b, n, -1, module.head_dim)
    q_pre = module.q_proj(hidden).view(shape).transpose(1, 2)
    k_pre = module.k_proj(hidden).view(shape).transpose(1, 2)
    rotary = cfg["rotary"]
    pos = torch.arange(n).unsqueeze(0)
    cos, sin = rotary(hidden, pos)
    q_rot, k_rot = modeling.apply_rotary_pos_emb(q_pre, k_pre, cos, sin)
    torch.testing.assert_close(q_rot, query)  # the model rotated the same way
    w, g = cfg["window"], min(cfg["n_global"], n)
    cos_w, sin_w = rotary(hidden, torch.full((1, n), w))
    cos_0, sin_0 = rotary(hidden, torch.zeros((1, n), dtype=torch.long))
    q_fix = modeling.apply_rotary_pos_emb(q_pre, q_pre, cos_w, sin_w)[0]
    k_zero = modeling.apply_rotary_pos_emb(k_pre, k_pre, cos_0, sin_0)[1][:, :, :g]
    q2 = torch.cat([q_rot, q_fix], dim=-1)
    k2 = torch.cat(
        [
            torch.cat([k_rot, torch.zeros_like(k_rot)], dim=-1),
            torch.cat([torch.zeros_like(k_zero), k_zero], dim=-1),
        ],
        dim=2,
    )
    v2 = torch.cat([value, value[:, :, :g]], dim=2)
    mask = torch.full((1, 1, n, n + g), float("-inf"))
    for i in range(n):
        for j in range(n):
            if j <= i and i - j < w:
                mask[0, 0, i, j] = 0.0
        for j in range(g):
            if i - j >= w:
                mask[0, 0, i, n + j] = 0.0
    return modeling.eager_attention_forward(module, q2, k2, v2, mask, scaling=module.scaling)


_REFERENCE_CONFIG: dict = {}
AttentionInterface.register(REF, _reference_forward)
AttentionMaskInterface.register(REF, ALL_MASK_ATTENTION_FUNCTIONS["sdpa"])


def reference_logits(model, ids: torch.Tensor, n_global: int, window: int) -> torch.Tensor:
    _REFERENCE_CONFIG.update(rotary=model.model.rotary_emb, n_global=n_global, window=window)
    handles = []
    for layer in model.model.layers:

        def keep(mod, args, kwargs):
            mod._posgen_test_hidden = kwargs.get("hidden_states", args[0] if args else None)

        handles.append(layer.self_attn.register_forward_pre_hook(keep, with_kwargs=True))
    original = model.config._attn_implementation
    model.set_attn_implementation(REF)
    try:
        with torch.no_grad():
            return model(ids).logits
    finally:
        model.set_attn_implementation(original)
        for h in handles:
            h.remove()


@pytest.fixture(scope="module")
def model():
    return build_short_context_model("llama", max_positions=64)


def _ids(n: int, seed: int = 3) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(3, 384, (1, n), generator=gen)


@pytest.mark.parametrize(
    ("n_global", "window", "n", "block"),
    [(4, 16, 100, 5), (4, 16, 100, None), (1, 32, 130, 17), (0, 16, 70, 8), (6, 8, 40, 3)],
)
def test_blocked_lambda_equals_dense_reference(model, n_global, window, n, block):
    ids = _ids(n)
    expected = reference_logits(model, ids, n_global, window)
    with torch.no_grad(), lambda_attention(model, LengthLambda(n_global, window), block):
        got = model(ids).logits
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)
    with torch.no_grad():
        plain = model(ids).logits
    assert (plain - got).abs().max() > 1e-3  # Λ really differs from plain causal here


def test_within_window_is_bit_equal_to_plain(model):
    ids = _ids(48)
    with torch.no_grad():
        plain = model(ids).logits
        with lambda_attention(model, LengthLambda(4, 48)):
            got = model(ids).logits
    assert torch.equal(plain, got)
    assert model.config._attn_implementation == "sdpa"  # restored


def test_refuses_padding_mask(model):
    ids = _ids(40)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    scheme = LengthLambda(2, 8)
    with pytest.raises(RuntimeError, match="attention mask"), lambda_attention(model, scheme):
        model(ids, attention_mask=mask)


def test_outside_context_is_an_error(model):
    from posgen.compat import register_attention
    from posgen.harness.model_side.attention import lambda_attention as mod

    name = mod.attention_name("sdpa")
    register_attention(
        name, lambda: mod.LAMBDA_ATTENTION.make_forward("sdpa"), mask="sdpa", wraps="sdpa"
    )
    model.set_attn_implementation(name)
    try:
        with pytest.raises(RuntimeError, match="outside"), torch.no_grad():
            model(_ids(20))
    finally:
        model.set_attn_implementation("sdpa")


@pytest.mark.parametrize("causal", [True, False])
def test_fused_kernel_and_explicit_local_attention_agree(causal):
    from posgen.harness.model_side.attention.lambda_attention import local_attention

    gen = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(1, 3, 12, 8, generator=gen) for _ in range(3))
    mask = None
    if not causal:
        i, j = torch.arange(12)[:, None], torch.arange(12)[None]
        mask = torch.zeros(12, 12).masked_fill((j > i) | (i - j >= 5), float("-inf"))[None, None]
    fused = local_attention(q, k, v, mask, 0.4, fused=True)
    explicit = local_attention(q, k, v, mask, 0.4, fused=False)
    for a, b in zip(fused, explicit, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_the_causal_prefix_off_cpu_equals_the_fused_kernel():
    """Queries before W: off CPU, torch's scaled_dot_product_attention (no L × L scores on
    CUDA) gives what the CPU's fused kernel gives."""
    from posgen.harness.model_side.attention.lambda_attention import (
        causal_attention,
        local_attention,
    )

    gen = torch.Generator().manual_seed(2)
    q, k, v = (torch.randn(1, 3, 12, 8, generator=gen) for _ in range(3))
    fused = causal_attention(q, k, v, 0.4, fused=True)
    torch.testing.assert_close(causal_attention(q, k, v, 0.4, fused=False), fused)
    torch.testing.assert_close(local_attention(q, k, v, None, 0.4, fused=True)[0], fused)


def test_lambda_on_cpu_runs_the_fused_kernel_not_explicit_scores(model, monkeypatch):
    """The speed of ``posgen length --quick`` rests on this: every local band goes through
    torch's fused attention kernel (one causal call before W, one per block after)."""
    from posgen.harness.model_side.attention import lambda_attention as mod

    calls = []
    kernel = mod.flash_attention_cpu()

    def spy():
        def run(*args, **kwargs):
            calls.append(kwargs["is_causal"])
            return kernel(*args, **kwargs)

        return run

    monkeypatch.setattr(mod, "flash_attention_cpu", spy)
    with torch.no_grad(), lambda_attention(model, LengthLambda(4, 16), block_size=10):
        model(_ids(56))
    layers = model.config.num_hidden_layers
    assert calls.count(True) == layers  # queries 0..15: one causal call per layer
    assert calls.count(False) == layers * 4  # queries 16..55 in blocks of 10
