"""Where ``qk`` schemes (``qk_noise``) enter: the model's own post-RoPE queries and keys.

posgen registers one attention function per base implementation with
``transformers.AttentionInterface`` under ``posgen_qk_noise_<base>`` (e.g.
``posgen_qk_noise_sdpa``), and the matching mask function under the same name with
``AttentionMaskInterface`` (without it attention would silently become non-causal). The
function hands query and key to each planned scheme's ``perturb_qk`` (for ``qk_noise``:
``q' = q + σ·(‖q‖/√d)·ε``, ε ~ N(0, I_d), drawn on the model's device; see
:class:`posgen.perturbations.features.QKNoise`), then calls the model's own
implementation, which stays the fast kernel the model was loaded with (``sdpa``, ...):
the registered ``<base>`` function, or for ``eager`` the family's own eager attention
(Gemma2's softcapping lives there). Shapes: ``query [B, Hq, T, d]``, ``key [B, Hkv, K, d]``
(``K = T`` in one full forward; with a KV cache the keys of every column so far).
What each call does is the :data:`Attend` active now: for one full forward
:func:`plan_attention`, for generation :mod:`.generation`'s. In one forward only the
first ``plan.spans[b]`` tokens of a row are perturbed, keyed on those tokens (the
context of a log-likelihood request, the whole window in rolling perplexity); the
continuation and padding are not.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from typing import Any

import torch

from posgen.compat import base_implementation, internal, using_attention
from posgen.harness.hf_posgen.layer_hooks import TWIN_ROTATIONS
from posgen.harness.hf_posgen.position_hooks import BatchPlan
from posgen.harness.model_family import family_of

ALL_ATTENTION_FUNCTIONS = internal("transformers.modeling_utils:ALL_ATTENTION_FUNCTIONS")

_PREFIX = "posgen_qk_noise_"

#: ``attend(run, module, query, key, value, mask, **kwargs)``: one attention call of a
#: layer under a perturbation, ``run`` the model's own implementation. The attention
#: function hands every call to the one active now (:func:`attention_active`).
Attend = Callable[..., Any]
_ACTIVE: ContextVar[Attend | None] = ContextVar("posgen_qk_attend", default=None)


def attention_name(base: str) -> str:
    """The registered name of the qk-noise wrapper around ``base`` (e.g. ``sdpa``)."""
    return _PREFIX + base


def check_base(base: str) -> str:
    """``base`` if qk noise can wrap it (a registered implementation, or ``eager``)."""
    if base != "eager" and base not in ALL_ATTENTION_FUNCTIONS:
        raise ValueError(
            f"qk_noise cannot wrap attention implementation {base!r}: it is not "
            f"registered with transformers ({sorted(ALL_ATTENTION_FUNCTIONS)})"
        )
    return base


def base_forward(base: str, module: torch.nn.Module) -> Callable[..., Any]:
    """The model's own attention function ``base`` for ``module`` (eager: its family's)."""
    if base == "eager":
        return family_of(module).eager_attention_function(module)
    return ALL_ATTENTION_FUNCTIONS[base]


def _make_forward(base: str) -> Callable[..., Any]:
    def forward(
        module: torch.nn.Module,
        query: torch.Tensor,
        key: torch.Tensor,
        value: torch.Tensor,
        attention_mask: torch.Tensor | None,
        **kwargs: Any,
    ) -> Any:
        attend = _ACTIVE.get()
        if attend is None:
            raise RuntimeError(
                f"attention implementation {attention_name(base)!r} was called "
                "outside posgen's qk_noise context; use HFPosgenLM"
            )
        if getattr(module, "layer_idx", None) is None:
            raise RuntimeError(f"{type(module).__name__} has no layer_idx; qk_noise needs it")
        run = base_forward(base, module)
        return attend(run, module, query, key, value, attention_mask, **kwargs)

    forward.__name__ = f"posgen_qk_noise_{base}_forward"
    return forward


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
    positions moved: recorded by :mod:`.layer_hooks`), else ``(query, key)``."""
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
    base = check_base(base_implementation(model))
    make = lambda: _make_forward(base)  # noqa: E731
    with using_attention(model, attention_name(base), make, base, base, (_ACTIVE, attend)):
        yield
