"""The global keys of Λ attention (:mod:`.lambda_attention`), merged into its local band.

The local band's output comes from torch's fused kernel with each row's log-sum-exp;
the ``G`` global keys, scored with the stationary queries, join it exactly through that
log-sum-exp (:func:`add_global`).
"""

from __future__ import annotations

import torch


def add_global(
    local: torch.Tensor,
    lse: torch.Tensor,
    q_fixed: torch.Tensor,
    k_global: torch.Tensor,
    v_global: torch.Tensor,
    start: int,
    window: int,
    scaling: float,
) -> torch.Tensor:
    """Merge the global keys into the local output: with ``s_ig = ⟨R(W) q_i, R(0) k_g⟩ ·
    scaling`` for the allowed ``g`` (``i − g ≥ W``) and ``L = logaddexp(lse_i, log Σ_g
    exp s_ig)``, the Λ output is ``exp(lse_i − L) · local_i + Σ_g exp(s_ig − L) v_g``."""
    lq, n_global = local.shape[2], k_global.shape[2]
    i = torch.arange(start, start + lq, device=local.device).unsqueeze(1)
    g = torch.arange(n_global, device=local.device).unsqueeze(0)
    scores = grouped_scores(q_fixed, k_global, q_fixed.shape[1] // k_global.shape[1])
    scores = (scores.float() * scaling).masked_fill(i - g < window, float("-inf"))
    total = torch.logaddexp(lse, torch.logsumexp(scores, dim=-1)).unsqueeze(-1)
    probs = torch.exp(scores - total)  # [B, H, Lq, G]; 0 where masked
    b, h = probs.shape[:2]
    groups = h // k_global.shape[1]
    mixed = probs.to(v_global.dtype).view(b, h // groups, groups, lq, n_global)
    mixed = (mixed @ v_global.unsqueeze(2)).view(b, h, lq, -1)
    return torch.exp(lse.unsqueeze(-1) - total) * local.float() + mixed.float()


def grouped_scores(q: torch.Tensor, k: torch.Tensor, groups: int) -> torch.Tensor:
    """``q [B, H, Lq, d] · k [B, Hkv, Lk, d]ᵀ`` with query head h using key head h // groups
    (transformers' repeat_kv order), shape ``[B, H, Lq, Lk]``, without copying keys."""
    b, h, lq, d = q.shape
    scores = q.view(b, h // groups, groups, lq, d) @ k.unsqueeze(2).transpose(-1, -2)
    return scores.view(b, h, lq, k.shape[2])
