"""LM-Infinite's Λ-shaped attention (Han et al., 2023) as a transformers attention function.

For query i (token index) and key j ≤ i, with ``G`` global tokens and window ``W``::

    local  (0 ≤ i − j < W):         s_ij = ⟨R(p_i) q_i, R(p_j) k_j⟩ · scaling
    global (j < G and i − j ≥ W):   s_ij = ⟨R(W) q_i, R(0) k_j⟩ · scaling
    otherwise:                      masked

``R(p)`` is the model's own rotary map at position p (including its attention scaling);
``p`` are the positions the forward used (perturbed ones included), so local keys keep
their true rotary distance and every global key sits at distance exactly W (LM-Infinite's
``stationary_query_states``: un-rotated key, query rotated to the fixed position W).
Softmax over the allowed keys (float32), output ``Σ_j a_ij v_j``.

The attention function only sees post-RoPE ``q``, ``k`` (``[B, H, T, d]``, ``[B, Hkv,
T, d]``). posgen rotates each post-RoPE query straight to the fixed position W
(``R(W) q_i = Rot(W − p_i) · query_i``, the rotation's (cos, sin) from the angle
difference divided by ``cos² + sin²``, the squared attention scaling), recovers the
pre-RoPE global keys with the model's own ``apply_rotary_pos_emb`` at ``(cos, −sin)``
divided by ``cos² + sin²``, and gets ``R(W)``, ``R(0)`` from the model's own rotary module
called with ``[W, 0, max position]`` (the max keeps dynamic rope scalings on the forward's
own frequencies). ``(cos, sin)`` and the positions come from a forward hook on the
rotary module. Queries before W are plain causal attention (one causal kernel call);
later ones are processed in blocks of ``Lq``: the block's local band (at most
``Lq + W − 1`` keys, one additive mask shared by all heads and layers) runs through torch's
fused attention kernel, which also returns each row's log-sum-exp; the ``G`` global keys
(scored with the stationary queries) are merged in exactly through that log-sum-exp. No
``[H, Lq, Lk]`` score tensor exists on CPU; memory is O(Lq·(W + G)) for the mask.

When ``T ≤ W`` the Λ mask is plain causal attention and the model's own attention
implementation is called unchanged (bit-identical to the plain model). After a KV cache
(``T_q < T_k``: query r is token ``T_k − T_q + r``) the same equation holds row for row:
every query is then processed in the blocks, the global keys' maps come from the rotary
module at positions 0 … G − 1, and the causal mask of such a forward is accepted
(:mod:`.lambda_cache`; the forward must run at the plain positions).
Assumptions (checked, with an error otherwise): one rotary module, full-width rotary
(``cos.shape[-1] == head_dim``), eval mode, no logit soft-capping, no attention sinks,
and no padding mask (one unpadded sequence, or right padding without a mask as lm-eval
sends).
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from posgen.compat import internal
from posgen.harness.model_family import family_of, require_rotary, rotary_modules
from posgen.harness.model_side.attention.lambda_cache import cached_maps, offset_mask_checked
from posgen.harness.model_side.attention.lambda_global import add_global
from posgen.harness.model_side.attention.rerotation import rotary_recorder
from posgen.harness.model_side.attention.wrapper import OwnAttention, WrappedAttention
from posgen.perturbations.length import LengthLambda

NAME_PREFIX = "posgen_lambda_"
BLOCK_BUDGET = 1 << 23  # band-mask elements per query block (8 Mi floats = 32 MiB)


@dataclass
class _ForwardState:
    """What the Λ function needs from the current forward: scheme, block size, the
    rotary module and its latest inputs/outputs, and the derived fixed-position maps."""

    scheme: LengthLambda
    block_size: int | None
    rotary: torch.nn.Module | None = None
    cos: torch.Tensor | None = None  # [B|1, T, d]
    sin: torch.Tensor | None = None
    positions: torch.Tensor | None = None  # [B|1, T]
    x: torch.Tensor | None = None
    fixed: tuple[torch.Tensor, torch.Tensor] | None = field(default=None)  # cos, sin at [W, 0]
    masks: dict[tuple[int, int, int], torch.Tensor] = field(default_factory=dict)


def attention_name(base: str) -> str:
    """The registered name of Λ's function around ``base`` (``sdpa``, ``eager``)."""
    return LAMBDA_ATTENTION.name(base)


def _layer_call(
    state: _ForwardState, own: OwnAttention, module, query, key, value, attention_mask, **kwargs
) -> tuple[torch.Tensor, Any]:
    """One layer's attention call: the model's own where every query sees all its keys,
    else Λ's output (after a KV cache, with its causal mask checked)."""
    if key.shape[2] <= state.scheme.window:  # every query sees all its keys
        return own(module, query, key, value, attention_mask, **kwargs)
    if query.shape[2] != key.shape[2]:  # queries after a KV cache: their causal mask
        attention_mask = offset_mask_checked(state, attention_mask, query, key)
    _check_supported(module, attention_mask, kwargs)
    return lambda_output(module, query, key, value, **kwargs), None


# the sdpa mask function: None for unpadded causal input
LAMBDA_ATTENTION = WrappedAttention(
    NAME_PREFIX, "lambda attention", "posgen's lambda_attention context", _layer_call, "sdpa"
)


def active_scheme() -> LengthLambda | None:
    """The scheme of the enclosing :func:`lambda_attention` block, or None outside one.

    Another attention function that runs inside the block (the decomposition's capture)
    uses it to learn that the forward is a Λ forward, and :func:`lambda_output` for the
    outputs."""
    state = LAMBDA_ATTENTION.current()
    return None if state is None else state.scheme


def lambda_output(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    **kwargs: Any,
) -> torch.Tensor:
    """The Λ attention output ``[B, T, H, d]`` (as an attention function returns it) of
    the enclosing :func:`lambda_attention` block, for an unpadded forward whose keys
    outnumber the window (``T_k > W``; fewer keys are plain causal attention): a full
    forward (``T_q == T_k``) or the last ``T_q`` queries after a KV cache of
    ``T_k − T_q`` tokens. ``kwargs``: the attention function's (``scaling``,
    ``sliding_window``, ...), checked as Λ checks them."""
    state = LAMBDA_ATTENTION.current()
    if state is None:
        raise RuntimeError("lambda_output was called outside posgen's lambda_attention context")
    if key.shape[2] <= state.scheme.window or query.shape[2] > key.shape[2]:
        raise RuntimeError(
            f"lambda_output needs more keys than the window (W = {state.scheme.window}) and "
            f"no more queries than keys; got {query.shape[2]} queries, {key.shape[2]} keys"
        )
    _check_supported(module, None, kwargs)
    scaling = kwargs.get("scaling") or module.scaling
    out = lambda_attention_forward(module, query, key, value, state, float(scaling))
    return out.transpose(1, 2).contiguous()


def config_refusal(config: Any) -> str | None:
    """Why Λ attention cannot run a model of ``config`` (read before any weight loads), or
    None: logit soft-capping, or sliding-window layers (both refused in the forward too)."""
    if getattr(config, "attn_logit_softcapping", None):
        return "lambda attention does not support logit soft-capping"
    types = getattr(config, "layer_types", None) or []
    sliding = "sliding_attention" in types or (
        not types
        and getattr(config, "sliding_window", None)
        and getattr(config, "use_sliding_window", True)
    )
    if sliding:
        return "lambda attention does not combine with sliding-window layers"
    return None


def _check_supported(module: torch.nn.Module, mask: torch.Tensor | None, kwargs: dict) -> None:
    if module.training:
        raise RuntimeError("lambda attention is for evaluation: call model.eval()")
    if mask is not None:
        raise RuntimeError(
            "lambda attention runs unpadded causal forwards; got an attention mask "
            "(padding or a sliding window). Run one sequence at a time without a mask."
        )
    config = getattr(module, "config", None)
    if (
        getattr(config, "attn_logit_softcapping", None)
        or getattr(module, "sinks", None) is not None
    ):
        raise RuntimeError("lambda attention does not support logit soft-capping or sinks")
    if kwargs.get("sliding_window"):
        raise RuntimeError("lambda attention does not combine with sliding-window layers")


def _fixed_maps(state: _ForwardState) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) of the model's rotary module at positions W and 0, shape ``[1, 2, d]``."""
    if state.fixed is None:
        assert state.rotary is not None and state.positions is not None and state.x is not None
        pos = state.positions
        top = pos.max().reshape(1, 1)
        fixed = torch.tensor([[state.scheme.window, 0]], dtype=pos.dtype, device=pos.device)
        ids = torch.cat([fixed, top], dim=1)
        cos, sin = state.rotary.forward(state.x[:1, :3], ids)  # bypass posgen's hooks
        state.fixed = (cos[:, :2], sin[:, :2])
    return state.fixed


def lambda_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    state: _ForwardState,
    scaling: float,
) -> torch.Tensor:
    """Λ attention output ``[B, H, T_q, d]`` from post-RoPE ``query [B, H, T_q, d]``,
    ``key``/``value [B, Hkv, T_k, d]`` (see the module docstring for the equation). The
    queries are the last ``T_q`` tokens: query r has token index ``o + r`` with
    ``o = T_k − T_q`` (0 for a full forward; the KV cache's length after one)."""
    _require_full_rotary(state, query)
    heads = query.shape[1]
    n, offset = key.shape[2], key.shape[2] - query.shape[2]
    window, n_global = state.scheme.window, min(state.scheme.n_global, n)
    q_fixed, k_global = _stationary(module, query, key, state, n_global)
    v_global = value[:, :, :n_global]
    groups = heads // key.shape[1]
    # local keys per query head, in transformers' repeat_kv order (head h uses h // groups)
    k_local = key.repeat_interleave(groups, dim=1) if groups > 1 else key
    v_local = value.repeat_interleave(groups, dim=1) if groups > 1 else value
    block = _queries_per_block(state, n_global)
    out = torch.empty_like(query)
    first = offset
    if offset == 0:  # queries before W see plain causal attention (no key is out of the
        # window, no global key is allowed yet): one causal kernel call, which skips the
        # masked half
        out[:, :, :window] = causal_attention(
            query[:, :, :window], k_local[:, :, :window], v_local[:, :, :window], scaling
        ).to(query.dtype)
        first = window
    for start in range(first, n, block):  # token indices of the block's queries
        stop, lo = min(n, start + block), max(0, start - window + 1)
        rows = slice(start - offset, stop - offset)
        mask = _band_mask(state, start, stop, lo, window, query)
        local, lse = local_attention(
            query[:, :, rows], k_local[:, :, lo:stop], v_local[:, :, lo:stop], mask, scaling
        )
        if n_global:
            local = add_global(
                local, lse, q_fixed[:, :, rows], k_global, v_global, start, window, scaling
            )
        out[:, :, rows] = local.to(query.dtype)
    return out


def _require_full_rotary(state: _ForwardState, query: torch.Tensor) -> None:
    """Refuse a forward whose rotary maps Λ did not see, or that rotate part of each head
    or not every query (``cos [B|1, T_q, d]`` for ``query [B, H, T_q, d]``)."""
    if state.cos is None or state.sin is None:
        raise RuntimeError("lambda attention saw no rotary embedding in this forward")
    if state.cos.shape[-1] != query.shape[-1] or state.cos.shape[-2] != query.shape[2]:
        raise RuntimeError(
            f"lambda attention needs full-width rotary on every token: cos has shape "
            f"{tuple(state.cos.shape)}, queries {tuple(query.shape)}"
        )


def _queries_per_block(state: _ForwardState, n_global: int) -> int:
    """The block size asked for, else at most 1024 queries, so that one block's band mask
    ``[Lq, Lq + W − 1]`` stays near :data:`BLOCK_BUDGET` elements."""
    window = state.scheme.window
    return state.block_size or max(16, min(1024, BLOCK_BUDGET // (window + n_global + 1024)))


def _stationary(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    state: _ForwardState,
    n_global: int,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The stationary queries ``R(W) q_i`` ``[B, H, T_q, d]`` of every query and the global
    keys ``R(0) k_g`` ``[B, Hkv, G, d]``. Since ``query_i = a·Rot(p_i) q_i``, ``R(W) q_i =
    Rot(W − p_i) query_i``: one rotation whose (cos, sin) follow from the angle difference,
    divided by a² (no head dimension); the global keys are un-rotated at their own
    positions' (cos, −sin) divided by a², then rotated to 0."""
    apply = family_of(module).apply_rotary_function(module)
    cos, sin = state.cos, state.sin  # [B|1, T_q, d]
    norm = cos * cos + sin * sin  # squared attention scaling a²
    fixed_cos, fixed_sin = _fixed_maps(state)
    c_w, s_w = fixed_cos[:, :1], fixed_sin[:, :1]
    to_w = ((c_w * cos + s_w * sin) / norm, (s_w * cos - c_w * sin) / norm)
    q_fixed = apply(query, query[:, :, :1], *to_w)[0]
    if key.shape[2] == query.shape[2]:
        g_cos, g_sin = cos[:, :n_global], sin[:, :n_global]
    else:
        g_cos, g_sin = cached_maps(state, n_global, key.shape[2] - query.shape[2])
    k_plain = apply(key[:, :, :n_global], key[:, :, :n_global], g_cos, -g_sin)[0]
    k_plain = k_plain / (g_cos * g_cos + g_sin * g_sin).unsqueeze(1)
    k_global = apply(k_plain, k_plain, fixed_cos[:, 1:], fixed_sin[:, 1:])[0]
    return q_fixed, k_global


def _band_mask(
    state: _ForwardState, start: int, stop: int, lo: int, window: int, like: torch.Tensor
) -> torch.Tensor:
    """Additive mask ``[1, 1, stop−start, stop−lo]`` of the local band: 0 where
    ``0 ≤ i − j < W``, −inf elsewhere. Blocks with the same offsets share one mask for the
    whole forward (every layer)."""
    key = (start - lo, stop - start, stop - lo)
    mask = state.masks.get(key)
    if mask is None:
        i = torch.arange(start, stop, device=like.device).unsqueeze(1)
        j = torch.arange(lo, stop, device=like.device).unsqueeze(0)
        allowed = (j <= i) & (i - j < window)
        mask = torch.zeros(allowed.shape, dtype=like.dtype, device=like.device)
        mask = mask.masked_fill(~allowed, float("-inf"))[None, None]
        state.masks[key] = mask
    return mask


def local_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None,
    scale: float,
    fused: bool | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax attention of ``query [B, H, Lq, d]`` over ``key``/``value [B, H, Lk, d]``
    with the additive ``mask`` (every row allows at least one key), or causal attention
    (``Lq == Lk``) when ``mask`` is None: the output ``[B, H, Lq, d]`` and
    ``lse = log Σ_j exp(s_ij)`` ``[B, H, Lq]`` (float32), which :func:`_add_global` needs
    to merge in the global keys exactly.

    ``fused`` (default: on CPU) runs torch's fused flash-attention kernel (the one
    ``scaled_dot_product_attention`` runs on CPU; its op also returns the log-sum-exp);
    otherwise the same equation is computed with explicit scores ``[B, H, Lq, Lk]``."""
    if fused is None:
        fused = query.device.type == "cpu"
    if fused:
        kernel = flash_attention_cpu()
        out, lse = kernel(query, key, value, is_causal=mask is None, attn_mask=mask, scale=scale)
        return out, lse.float()
    if mask is None:
        future = torch.ones(key.shape[2], key.shape[2], dtype=torch.bool, device=query.device)
        mask = torch.zeros(future.shape, device=query.device).masked_fill(
            future.triu(1), float("-inf")
        )
    scores = (query @ key.transpose(-1, -2)).float() * scale + mask.float()
    lse = torch.logsumexp(scores, dim=-1)
    probs = torch.exp(scores - lse.unsqueeze(-1)).to(value.dtype)
    return probs @ value, lse


def causal_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    scale: float,
    fused: bool | None = None,
) -> torch.Tensor:
    """Causal softmax attention ``[B, H, L, d]`` of equal-length query and key, without an
    L × L tensor: torch's fused CPU kernel on CPU (``fused``, default there), elsewhere
    ``scaled_dot_product_attention(is_causal=True)`` (flash or memory-efficient kernels
    on CUDA)."""
    if fused is None:
        fused = query.device.type == "cpu"
    if fused:
        return flash_attention_cpu()(query, key, value, is_causal=True, scale=scale)[0]
    return torch.nn.functional.scaled_dot_product_attention(
        query, key, value, is_causal=True, scale=scale
    )


def flash_attention_cpu() -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    return internal("torch:ops.aten._scaled_dot_product_flash_attention_for_cpu")


@contextmanager
def lambda_attention(
    model: torch.nn.Module, scheme: LengthLambda, block_size: int | None = None
) -> Iterator[None]:
    """Within the block, ``model`` runs Λ attention; its implementation is restored on
    exit and the rotary hook removed. ``block_size``: queries per block (None: at most 1024,
    sized so one block's band mask stays near 32 MiB)."""
    require_rotary(model, f"length={scheme.to_string()}")
    modules = rotary_modules(model)
    if len(modules) != 1:
        raise RuntimeError(
            f"lambda attention supports models with one rotary module, found {len(modules)}"
        )
    state = _ForwardState(scheme, block_size)
    with LAMBDA_ATTENTION.active(model, state, [(modules[0], rotary_recorder(state))]):
        yield
