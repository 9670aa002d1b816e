"""Where ``qk`` schemes (``qk_noise``) enter: the model's own post-RoPE queries and keys.

posgen's attention function ``posgen_qk_noise_<base>`` (e.g. ``posgen_qk_noise_sdpa``,
with the matching mask function: without it attention would silently become
non-causal) is :data:`QK_NOISE_ATTENTION`, registered, installed and removed by
:mod:`.wrapper`. It hands query and key to each planned scheme's
``perturb_qk`` (for ``qk_noise``: ``q' = q + σ·(‖q‖/√d)·ε``, ε ~ N(0, I_d), drawn on the
model's device; see :class:`posgen.perturbations.features.QKNoise`), then calls the
model's own implementation, which stays the fast kernel the model was loaded with
(``sdpa``, ...): the registered ``<base>`` function, or for ``eager`` the family's own
eager attention (Gemma2's softcapping lives there). Shapes: ``query [B, Hq, T, d]``,
``key [B, Hkv, K, d]`` (``K = T`` in one full forward; with a KV cache the keys of every
column so far). What each call does is the :data:`Attend` active now: for one full
forward :func:`plan_attention`, for generation :mod:`posgen.harness.hf_posgen.generation`'s. In one forward only
the first ``plan.spans[b]`` tokens of a row are perturbed, keyed on those tokens (the
context of a log-likelihood request, the whole window in rolling perplexity); the
continuation and padding are not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

import torch

from posgen.harness.model_side.attention.wrapper import OwnAttention, WrappedAttention
from posgen.harness.model_side.positions.layers import TWIN_ROTATIONS
from posgen.harness.model_side.positions.plan import BatchPlan

#: ``attend(run, module, query, key, value, mask, **kwargs)``: one attention call of a
#: layer under a perturbation, ``run`` the model's own implementation. The attention
#: function hands every call to the one active now (:func:`attention_active`).
Attend = Callable[..., Any]


def _layer_call(
    attend: Attend, own: OwnAttention, module: torch.nn.Module, *args: Any, **kwargs: Any
) -> Any:
    """One layer's attention call, handed to the active ``attend`` (it needs the layer)."""
    if getattr(module, "layer_idx", None) is None:
        raise RuntimeError(f"{type(module).__name__} has no layer_idx; qk_noise needs it")
    return attend(own, module, *args, **kwargs)


QK_NOISE_ATTENTION = WrappedAttention(
    "posgen_qk_noise_", "qk_noise", "posgen's qk_noise context; use HFPosgenLM", _layer_call
)


def plan_attention(plan: BatchPlan) -> Attend:
    """The attention of one full forward planned by ``plan``: each layer's query and key
    after the planned qk schemes, or with ``heads=`` the chosen heads of the perturbed
    run (:func:`mix_heads`)."""
    if not (plan.qk or plan.heads):
        raise RuntimeError("the plan has no qk scheme and no heads=; nothing to attend with")

    def attend(run, module, query, key, value, mask, **kwargs) -> Any:
        layer = int(module.layer_idx)
        if plan.heads and plan.acts_in(layer):
            q, k = twin_rotation(plan, layer, query, key)
            moved = perturb(q, plan, layer, "query"), perturb(k, plan, layer, "key")
            return mix_heads(run, module, (query, key), moved, value, mask, plan.heads, **kwargs)
        query = perturb(query, plan, layer, "query")
        key = perturb(key, plan, layer, "key")
        return run(module, query, key, value, mask, **kwargs)

    return attend


def twin_rotation(
    plan: BatchPlan, layer: int, query: torch.Tensor, key: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Layer ``layer``'s query and key rotated by the perturbed angles (``heads=`` with
    positions moved: recorded by :mod:`..positions.layers`), else ``(query, key)``."""
    twins = TWIN_ROTATIONS.get()
    moved = None if twins is None else twins.pop(layer, None)
    if plan.positions is not None and moved is None:
        raise RuntimeError(f"layer {layer}: no perturbed rotation was recorded for heads=")
    return moved if moved is not None else (query, key)


def mix_heads(
    run,
    module: torch.nn.Module,
    plain: tuple[torch.Tensor, torch.Tensor],
    moved: tuple[torch.Tensor, torch.Tensor],
    value: torch.Tensor,
    mask: Any,
    heads: tuple[int, ...],
    **kwargs: Any,
) -> Any:
    """``heads=``: the model's attention run twice, on the ``plain`` and on the ``moved``
    (perturbed) query and key, and the chosen query ``heads`` of the perturbed run put
    into the plain one. Outputs are ``[B, T, H, d]`` (transformers' attention functions),
    weights ``[B, H, T, K]``."""
    layer = int(module.layer_idx)
    out, weights = run(module, *plain, value, mask, **kwargs)
    out_p, weights_p = run(module, *moved, value, mask, **kwargs)
    heads_list = list(heads)
    if max(heads_list) >= out.shape[2]:
        raise RuntimeError(f"heads={heads_list}: layer {layer} has {out.shape[2]} query heads")
    out = out.clone()
    out[:, :, heads_list] = out_p[:, :, heads_list]
    if weights is not None and weights_p is not None:
        weights = weights.clone()
        weights[:, heads_list] = weights_p[:, heads_list]
    return out, weights


def perturb(x: torch.Tensor, plan: BatchPlan, layer: int, tensor: str) -> torch.Tensor:
    """``x`` (``[B, H, T, d]``, ``tensor``: ``"query"`` or ``"key"``) after every planned
    qk scheme, in order; unchanged in a layer outside ``plan.layers``."""
    if not plan.acts_in(layer):
        return x
    for scheme in plan.qk:
        x = scheme.perturb_qk(x, tensor, layer, plan.spans, plan.keys, plan.seed, plan.slots)
    return x


@contextmanager
def qk_noise_active(model: torch.nn.Module, plan: BatchPlan) -> Iterator[None]:
    """Within the block, ``model`` runs the qk-noise wrapper of its own attention
    implementation with ``plan``; the implementation is restored on exit."""
    with attention_active(model, plan_attention(plan)):
        yield


@contextmanager
def attention_active(model: torch.nn.Module, attend: Attend) -> Iterator[None]:
    """Within the block, every attention call of ``model`` goes to ``attend`` with the
    model's own implementation (:data:`Attend`); the implementation is restored on exit."""
    with QK_NOISE_ATTENTION.active(model, attend):
        yield
