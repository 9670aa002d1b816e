"""A one-layer GPT-NeoX whose attention logits are exactly additive per head, with an
optional planted position–content interaction (planted truth for ``logits=`` and the
predicted change).

GPT-NeoX rotates the first ``rotary_ndims`` = 4 of each head's 16 query/key dims and
passes the other 12 through. With x_t the layer-normed embedding of token t, per head:

- rotated dims: q = R(t)·q₀ (weights 0, bias q₀) and k = R(t)·(k₀ + λ U x_t), so
  q_i·k_j = q₀ᵀR(j−i)k₀ + λ q₀ᵀR(j−i)U x_j: a function of i − j, plus the planted
  interaction I[i, j] = λ q₀ᵀR(j−i)U x_j (distance × key content);
- passed dims: q = (1, β_i, 0, …), k = (γ_j, 1, 0, …) with β = w_b·x, γ = w_c·x, so
  q_i·k_j = β_i + γ_j.

So W = s·(a(i−j) + β_i + γ_j) + s·I (s = 16^-½): exactly a[i−j] + b[i] + c[j] at λ = 0.
On the window :func:`block_window` (a block of 4 tokens repeated), γ over the block is
(1, −3, 3, −1)·γ₀: zero mean, zero linear and quadratic moment, so over the causal
entries (key j weighted by n − j) c has no weighted mean or linear trend and the fit's
normalisation gives back a = s·a(d) + const exactly (the prediction then holds entry by
entry, not only up to the null space's linear trend).
"""

from __future__ import annotations

import torch
from transformers import AutoConfig, AutoModelForCausalLM

from tiny_models import CONFIGS

BLOCK = (10, 11, 12, 13)  # token ids of the repeated block
GAMMA = (1.0, -3.0, 3.0, -1.0)  # γ over the block: its first three moments vanish


def block_window(n: int) -> list[int]:
    """n tokens (a multiple of 4): the block repeated."""
    if n % len(BLOCK):
        raise ValueError(f"n must be a multiple of {len(BLOCK)}")
    return list(BLOCK) * (n // len(BLOCK))


def planted_model(interaction: float = 0.0, seed: int = 0) -> torch.nn.Module:
    """The one-layer GPT-NeoX of the module doc with interaction strength λ = ``interaction``
    (everything else the same for every λ, so W_λ − W_0 is the planted interaction)."""
    cfg = AutoConfig.for_model("gpt_neox", **dict(CONFIGS["gpt_neox"], num_hidden_layers=1))
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(seed + 1)
    attn = model.gpt_neox.layers[0].attention
    hs, rot, heads = attn.head_size, attn.rotary_ndims, cfg.num_attention_heads
    hidden = cfg.hidden_size
    with torch.no_grad():
        x = model.gpt_neox.layers[0].input_layernorm(model.gpt_neox.embed_in.weight[list(BLOCK)])
        weight, bias = attn.query_key_value.weight, attn.query_key_value.bias
        weight[: 2 * hs].zero_()  # q and k rows of every head are set below
        for h in range(heads):
            q, k = h * 3 * hs, h * 3 * hs + hs
            weight[q : k + hs].zero_()
            bias[q : k + hs].zero_()
            bias[q : q + rot] = 2.0 * torch.randn(rot, generator=gen)  # q₀
            bias[k : k + rot] = 2.0 * torch.randn(rot, generator=gen)  # k₀
            u = torch.randn(rot, hidden, generator=gen) / hidden**0.5
            weight[k : k + rot] = interaction * u
            bias[q + rot] = 1.0  # q pass: (1, β)
            weight[q + rot + 1] = torch.randn(hidden, generator=gen) / hidden**0.5
            gamma = torch.tensor(GAMMA, dtype=torch.float64) * (0.5 + h)
            w_c = torch.linalg.lstsq(x.double(), gamma[:, None]).solution[:, 0]
            weight[k + rot] = w_c.float()  # k pass: (γ, 1)
            bias[k + rot + 1] = 1.0
    return model


POSITIONAL_LAYER = 2  # positional_llama's default: the one position-dependent layer


def positional_llama(layers: int = 4, positional: int = POSITIONAL_LAYER) -> torch.nn.Module:
    """A Llama whose layers have q/k projections scaled by 1e-3 (attention logits ~1e-6
    of their size: nearly uniform, barely position-dependent), except layer
    ``positional``: q/k scaled up 8x (sharp, position-dependent attention) and v/o 4x (so
    what it attends to moves the residual stream)."""
    cfg = AutoConfig.for_model("llama", **dict(CONFIGS["llama"], num_hidden_layers=layers))
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    with torch.no_grad():
        for i, layer in enumerate(model.model.layers):
            scale = 8.0 if i == positional else 1e-3
            layer.self_attn.q_proj.weight.mul_(scale)
            layer.self_attn.k_proj.weight.mul_(scale)
            if i == positional:
                layer.self_attn.v_proj.weight.mul_(4.0)
                layer.self_attn.o_proj.weight.mul_(4.0)
    return model
