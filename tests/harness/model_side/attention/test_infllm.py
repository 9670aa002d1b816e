"""InfLLM attention (``length=infllm``) on tiny random models: exact against full
attention (every block retrieved, true positions), against an explicit masked forward
(memory off: initial + local tokens), at InfLLM's own positions against a dense
reference, and its retrieval on planted blocks."""

from __future__ import annotations

import pytest
import torch
from tests.tiny_models import build_short_context_model

from posgen.harness.model_side.attention import infllm as mod
from posgen.harness.model_side.attention.infllm import infllm_attention
from posgen.perturbations.length import LengthInfLLM

SMALL = dict(n_init=2, n_local=16, block_size=4, repr_topk=2, exc_block_size=8)


@pytest.fixture(scope="module")
def model():
    return build_short_context_model("llama", max_positions=64)  # 4 heads, 2 kv heads


def _ids(n: int, seed: int = 3) -> torch.Tensor:
    gen = torch.Generator().manual_seed(seed)
    return torch.randint(3, 384, (1, n), generator=gen)


def _run(model, ids, scheme, **switches) -> torch.Tensor:
    with torch.no_grad(), infllm_attention(model, scheme, **switches):
        return model(ids).logits


@pytest.mark.parametrize(("n", "block", "chunk"), [(100, 4, 8), (77, 3, 5), (130, 8, 16)])
def test_every_block_at_true_positions_equals_full_attention(model, n, block, chunk):
    scheme = LengthInfLLM(**dict(SMALL, block_size=block, exc_block_size=chunk, topk=1000))
    with torch.no_grad():
        plain = model(_ids(n)).logits
    got = _run(model, _ids(n), scheme, true_positions=True)
    torch.testing.assert_close(got, plain, rtol=1e-5, atol=1e-5)


def test_few_blocks_or_infllm_positions_differ_from_full_attention(model):
    ids = _ids(100)
    with torch.no_grad():
        plain = model(ids).logits
    few = _run(model, ids, LengthInfLLM(**SMALL, topk=2), true_positions=True)
    fixed = _run(model, ids, LengthInfLLM(**SMALL, topk=1000))
    assert (few - plain).abs().max() > 1e-3  # retrieval drops blocks
    assert (fixed - plain).abs().max() > 1e-3  # memory at distance n_local − 1
    torch.testing.assert_close(few[:, :16], plain[:, :16])  # inside the window: causal


def test_memory_off_equals_a_masked_forward_of_initial_and_local_tokens(model):
    n, scheme = 90, LengthInfLLM(**SMALL, topk=4)
    i = torch.arange(n).unsqueeze(1)
    j = torch.arange(n).unsqueeze(0)
    allowed = (j <= i) & ((i - j < scheme.n_local) | (j < scheme.n_init))
    with torch.no_grad():
        masked = model(_ids(n), attention_mask=allowed[None, None]).logits
        plain = model(_ids(n)).logits
    got = _run(model, _ids(n), scheme, true_positions=True, memory=False)
    torch.testing.assert_close(got, masked, rtol=1e-5, atol=1e-5)
    assert (masked - plain).abs().max() > 1e-3  # the mask really removes keys


def test_short_forward_is_the_models_own_attention(model):
    ids = _ids(16)
    with torch.no_grad():
        plain = model(ids).logits
    assert torch.equal(_run(model, ids, LengthInfLLM(**SMALL, topk=2)), plain)


def test_memory_views_rotate_with_the_models_own_rotary(model):
    """R(L − 1) q and R(0) k from post-RoPE q, k equal the pre-RoPE ones rotated there."""
    rotary, attn = model.model.rotary_emb, model.model.layers[0].self_attn
    x = torch.randn(1, 40, 64)
    pos = torch.arange(40).unsqueeze(0)
    cos, sin = rotary(x, pos)
    q_pre, k_pre = torch.randn(1, 4, 40, 16), torch.randn(1, 2, 40, 16)
    modeling = __import__(type(attn).__module__, fromlist=["apply_rotary_pos_emb"])
    q_rot, k_rot = modeling.apply_rotary_pos_emb(q_pre, k_pre, cos, sin)
    state = mod._State(LengthInfLLM(**SMALL, topk=2), rotary=rotary, cos=cos, sin=sin)
    state.positions, state.x = pos, x
    q_mem, k_mem = mod.memory_views(attn, q_rot, k_rot, state)
    cos_l, sin_l = rotary(x, torch.full((1, 40), 15))
    cos_0, sin_0 = rotary(x, torch.zeros((1, 40), dtype=torch.long))
    torch.testing.assert_close(q_mem, modeling.apply_rotary_pos_emb(q_pre, q_pre, cos_l, sin_l)[0])
    torch.testing.assert_close(k_mem, modeling.apply_rotary_pos_emb(k_pre, k_pre, cos_0, sin_0)[1])


def test_retrieval_finds_the_planted_blocks():
    gen = torch.Generator().manual_seed(0)
    heads, blocks, dim = 4, 12, 16
    q_mean = torch.randn(heads, dim, generator=gen)
    reprs = 0.1 * torch.randn(heads, blocks, dim, generator=gen)
    for b, weight in ((9, 3.0), (2, 2.0), (5, 1.0)):
        reprs[:, b] += weight * q_mean / q_mean.norm(dim=-1, keepdim=True)
    assert mod.retrieve_blocks(q_mean, reprs, 2).tolist() == [2, 9]
    assert mod.retrieve_blocks(q_mean, reprs, 3).tolist() == [2, 5, 9]
    assert mod.retrieve_blocks(q_mean, reprs[:, :2], 3).tolist() == [0, 1]  # ≤ topk: all


def test_representatives_are_the_most_attended_keys():
    scheme = LengthInfLLM(**SMALL, topk=2)  # blocks of 4 after 2 initial tokens
    keys = torch.randn(2, 14, 3)
    score = torch.zeros(2, 14)
    score[0, [3, 5]] = 1.0  # block 0 = tokens 2..5; head 0 favours 3 and 5
    score[1, [2, 4]] = 1.0
    score[:, [6, 9]] = 1.0  # block 1 = tokens 6..9
    got = mod.block_representatives(keys, score, 0, 2, scheme)
    torch.testing.assert_close(got[0, 0], keys[0, [3, 5]].mean(0))
    torch.testing.assert_close(got[1, 0], keys[1, [2, 4]].mean(0))
    torch.testing.assert_close(got[:, 1], keys[:, [6, 9]].mean(1))


def test_block_schedule_follows_infllm():
    scheme = LengthInfLLM(**SMALL, topk=2)  # L = 16, n_init = 2, B = 4
    assert [mod.blocks_before(s, scheme) for s in (0, 16, 21, 22, 26, 40)] == [0, 0, 0, 1, 2, 5]
    state = mod._State(scheme)
    got = mod.memory_keys(40, 48, 5, torch.tensor([1, 3]), state).tolist()
    assert got == [0, 1, 6, 7, 8, 9, 14, 15, 16, 17, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31]
