"""Λ attention (:mod:`.lambda_attention`) for queries that follow a KV cache.

A forward of the last ``T_q`` tokens over ``T_k`` keys (the first ``T_k − T_q`` from a
cache, as ``posgen length`` runs a scheme's suffix after a shared prefix) gets, per layer,
post-RoPE queries of those tokens only and the whole cache's keys; query r is token
``T_k − T_q + r``. Λ then needs the rotary maps of its global keys, which that forward's
rotary module did not compute (:func:`cached_maps`), and accepts the causal mask such a
forward carries instead of refusing every mask (:func:`offset_mask_checked`).
"""

from __future__ import annotations

from typing import Any

import torch


def cached_maps(state: Any, n_global: int, offset: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) ``[1, G, d]`` of the first ``G`` keys when they come from a KV cache
    (``offset`` cached tokens): the rotary module at positions 0 … G − 1, which needs the
    forward to run at the plain positions (``offset`` … ``offset + T_q − 1``; checked)."""
    assert state.rotary is not None and state.positions is not None and state.x is not None
    pos = state.positions
    plain = torch.arange(offset, offset + pos.shape[-1], dtype=pos.dtype, device=pos.device)
    if not bool((pos == plain).all()):
        raise RuntimeError(
            "lambda attention after a KV cache runs at the plain positions (token indices); "
            "this forward has others (a position scheme): run one full forward instead"
        )
    ids = torch.arange(n_global + 1, dtype=pos.dtype, device=pos.device)[None]
    ids[0, -1] = pos.max()  # the max keeps dynamic rope scalings on the forward's frequencies
    cos, sin = state.rotary.forward(state.x[:1, :1], ids)  # bypass posgen's hooks
    return cos[:, :n_global], sin[:, :n_global]


def offset_mask_checked(
    state: Any, mask: torch.Tensor | None, query: torch.Tensor, key: torch.Tensor
) -> torch.Tensor | None:
    """None where ``mask`` is the causal mask of the last ``T_q`` queries over ``T_k`` keys
    (query r sees keys j ≤ T_k − T_q + r: what a forward after an unpadded KV cache gets;
    bool, or additive with 0 where allowed), checked once per forward; otherwise ``mask``
    itself, which Λ then refuses (padding)."""
    n_q, n_k = query.shape[2], key.shape[2]
    tag = (-1, n_q, n_k)
    if mask is None or state.masks.get(tag) is mask:
        return None
    allowed = mask if mask.dtype == torch.bool else mask == 0
    i = torch.arange(n_k - n_q, n_k, device=mask.device)[:, None]
    j = torch.arange(n_k, device=mask.device)[None]
    if allowed.shape[-2:] != (n_q, n_k) or not bool((allowed == (j <= i)).all()):
        return mask
    state.masks[tag] = mask
    return None
