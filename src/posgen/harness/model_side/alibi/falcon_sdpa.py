"""Falcon-ALiBi's pre-softmax logits, where its sdpa attention forms them.

Falcon with ``alibi=True`` folds its bias into the mask it hands every decoder layer,
``masked_fill(alibi / √d, causal < −1, min)`` ``[B, H, n, K]`` (d the head size), and its
sdpa attention (transformers 5.24's own call, 5.25's through ``sdpa_attention_forward``)
hands that mask to ``torch.nn.functional.scaled_dot_product_attention(q, k, v,
attn_mask=mask)``. The logits sdpa forms are therefore exactly ``q·kᵀ·s + mask``, i.e.

    W = q·kᵀ·s + bias       [B, H, n, K],   s = sdpa's scale (1/√d, Falcon's own)

on the attended entries (the mask holds the bias ``alibi/√d`` there), ``min`` elsewhere:
W is BLOOM's form, the logits before the mask.

:func:`posgen.harness.model_side.alibi.bias.alibi_bias_calls` hands each chosen layer's
attention module its mask wrapped by :func:`sdpa_mask` in a tensor subclass whose
``__torch_function__`` catches the sdpa call that takes it as ``attn_mask`` (no global
patch of torch). That call computes W from the model's own q and k (k's heads expanded to
q's: Falcon's multi-query key), reads the bias ``[B, H, 1, K]`` from the mask's attended
entries (each key's value, the same in every query that attends it, checked at every
call; 0 on keys no query attends), and hands ``(bias, W, q, kᵀ, β = 1, α = s)``, flattened
to ``[B·H, …]``, to the callback of :data:`.bias.OnCall`, as BLOOM's wrapped
``baddbmm`` does. Then the real sdpa runs on the plain tensors: with the plain mask (the
model's own output, bit for bit) where the callback answers None, else with
``mask + (W' − W)`` (so sdpa forms the callback's W'; in the mask's dtype, and entries with
W' = W keep the model's mask bit for bit). At every call ``softmax(W, masked)·v`` (W'
where replaced) is checked against sdpa's output (to a tolerance of the dtype: 1e-5 of
max |v| in float32), so logits that are not what sdpa forms are refused. Nothing of
attention is re-implemented; the cost is the [B, H, n, K] float32 W and one more
softmax·v per layer.

Refused in one line: eager attention (on transformers 5.24 it adds the bias a second time
beside the mask, and it calls no sdpa: load the model with sdpa, the default), a forward
with a KV cache (fewer queries than keys), dropout, and a call of the layer that never
hands its mask to sdpa (a release that forms Falcon's logits otherwise).
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch

from posgen.compat import attn_implementation

SDPA = torch.nn.functional.scaled_dot_product_attention


class _SdpaMask(torch.Tensor):
    """The mask a Falcon attention module is handed; the sdpa call that takes it as
    ``attn_mask`` runs ``_posgen_sdpa`` instead (module doc); every other function sees
    the plain tensor and returns plain tensors."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        mask = kwargs.get("attn_mask")
        if func is SDPA and isinstance(mask, _SdpaMask):
            return mask._posgen_sdpa(*args, **{k: v for k, v in kwargs.items() if k != "attn_mask"})
        with torch._C.DisableTorchFunctionSubclass():
            return func(*args, **kwargs)


def sdpa_mask(
    mask: torch.Tensor | None, record: Callable[..., torch.Tensor | None]
) -> torch.Tensor:
    """``mask`` (the 4-D mask a Falcon attention module is handed) wrapped: the sdpa call
    that takes it as ``attn_mask`` hands ``record`` its logits and goes on with the
    answer, where not None (module doc)."""
    if mask is None or mask.ndim != 4:
        raise _falcon_error("Falcon's attention was called without its 4-D mask")
    wrapped = mask.as_subclass(_SdpaMask)
    wrapped._posgen_sdpa = _intercept(mask, record)
    return wrapped


def _falcon_error(what: str) -> RuntimeError:
    return RuntimeError(f"{what}; posgen is tested with transformers 5.24's and 5.25's Falcon")


def mask_bias(mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(the bias ``[B, H, 1, K]`` float32 Falcon folded into ``mask`` ``[B, H, n, K]``, the
    masked entries ``[B, H, n, K]`` bool): each key's value on its attended entries
    (mask ≠ min), 0 on keys no query attends. Refuses a mask whose attended entries differ
    within a key (not a per-key bias)."""
    masked = mask == torch.finfo(mask.dtype).min
    found = mask.float().masked_fill(masked, -math.inf).amax(-2, keepdim=True)
    bias = found.masked_fill(found == -math.inf, 0.0)
    if not torch.equal(torch.where(masked, mask, bias.to(mask.dtype).expand_as(mask)), mask):
        raise _falcon_error("Falcon's mask is not one bias per key masked with min")
    return bias, masked


def _query_heads(key: torch.Tensor, heads: int) -> torch.Tensor:
    """``key`` ``[B, Hk, K, d]`` with its heads expanded to the ``heads`` query heads, as
    sdpa pairs them (broadcast of one key head, or ``enable_gqa``'s groups)."""
    if key.shape[1] == heads:
        return key
    if heads % key.shape[1]:
        raise _falcon_error(f"{key.shape[1]} key heads do not divide {heads} query heads")
    return key.repeat_interleave(heads // key.shape[1], dim=1)


def _tolerance(dtype: torch.dtype) -> float:
    """How far ``softmax(W)·v`` may be from sdpa's output, relative to max |v|."""
    return max(1e-5, 4 * torch.finfo(dtype).eps)


def _intercept(mask: torch.Tensor, record: Callable[..., torch.Tensor | None]):
    """The sdpa call that takes ``mask`` (plain) as ``attn_mask``: W recorded (and maybe
    replaced), then the real sdpa (module doc)."""

    def sdpa(query, key, value, dropout_p=0.0, is_causal=False, scale=None, enable_gqa=False):
        b, h, n, d = query.shape
        keys = key.shape[-2]
        if n != keys:
            raise RuntimeError(
                "Falcon's logits are captured and replaced over whole forwards only (no KV "
                "cache, no generate)"
            )
        if dropout_p or is_causal:
            raise _falcon_error("Falcon called sdpa with dropout or is_causal")
        s = 1.0 / math.sqrt(d) if scale is None else float(scale)
        k = _query_heads(key, h)  # [B, H, K, d]
        bias, masked = mask_bias(mask)
        w = torch.matmul(query.float(), k.float().transpose(-1, -2)) * s + bias  # [B, H, n, K]
        flat_k = k.transpose(-1, -2).reshape(b * h, d, keys)
        flat_bias = bias.expand(b, h, 1, keys).reshape(b * h, 1, keys)
        replaced = record(
            flat_bias, w.view(b * h, n, keys), query.reshape(b * h, n, d), flat_k, 1.0, s
        )
        used, logits = mask, w
        if replaced is not None:
            logits = replaced.view(b, h, n, keys).float()
            used = (mask.float() + (logits - w)).to(mask.dtype)  # W' − W: 0 off the fit
        out = SDPA(query, key, value, attn_mask=used, scale=scale, enable_gqa=enable_gqa)
        formed = logits.masked_fill(masked, torch.finfo(torch.float32).min)
        _check(formed, _query_heads(value, h), out)
        return out

    return sdpa


def _check(logits: torch.Tensor, value: torch.Tensor, out: torch.Tensor) -> None:
    """``softmax(logits)·v`` against sdpa's ``out`` ``[B, H, n, d]`` (module doc)."""
    mine = torch.matmul(torch.softmax(logits, dim=-1), value.float())
    scale = float(value.abs().max()) or 1.0
    error = float((mine - out.float()).abs().max())
    if error > _tolerance(out.dtype) * scale:
        raise _falcon_error(
            f"Falcon's sdpa output is {error:.3g} from softmax(q·kᵀ·s + mask)·v, the logits "
            "posgen reads"
        )


def refuse_eager(model: torch.nn.Module) -> None:
    """Refuse, in one line, a Falcon-ALiBi that does not run sdpa attention."""
    name = attn_implementation(model)
    if name != "sdpa":
        raise ValueError(
            f"Falcon-ALiBi's logits are read where its sdpa attention forms them; this model "
            f"runs {name!r} attention (on transformers 5.24 its eager attention adds the bias "
            "twice): load it with sdpa, the default"
        )
