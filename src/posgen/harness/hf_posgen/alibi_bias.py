"""The bias an ALiBi attention module (BLOOM) is handed, wrapped: its ``baddbmm`` is the
module's logits.

BLOOM does not run its attention through transformers' ``AttentionInterface``: each
``BloomAttention`` computes its logits as ``alibi.baddbmm(batch1=q, batch2=kᵀ, beta=β,
alpha=α)``, i.e. ``W = β·bias + α·q·kᵀ`` ``[B·H, n, n]``, then adds its mask, softmaxes
and multiplies by the values. :func:`alibi_bias_calls` hands the chosen layers' attention
modules their own bias wrapped in a tensor subclass whose ``baddbmm`` runs the model's own
call on the plain tensor and hands its inputs and output to a callback, which may return
other logits for the model to go on with. The decomposition's capture records
(:mod:`posgen.harness.decomposition.alibi_capture`); ``logits=`` replaces
(:mod:`.alibi_logit_replacement`). Nothing of attention is re-implemented.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from contextlib import ExitStack, contextmanager

import torch

from posgen.harness.position_family import position_family_of


class _WrappedBias(torch.Tensor):
    """The bias a BLOOM attention module is handed; its ``baddbmm`` (the model's logits)
    runs as the plain tensor's and hands its inputs and output to ``_posgen_record``, whose
    answer, where not None, is the logits the model goes on with."""

    def baddbmm(self, batch1, batch2, *, beta=1.0, alpha=1.0) -> torch.Tensor:
        """The model's own call, on the plain tensor, recorded (and maybe replaced)."""
        plain = self.as_subclass(torch.Tensor)
        out = plain.baddbmm(batch1, batch2, beta=beta, alpha=alpha)
        replaced = self._posgen_record(plain, out, batch1, batch2, beta, alpha)
        return out if replaced is None else replaced


def _wrapped(bias: torch.Tensor, record: Callable[..., torch.Tensor | None]) -> torch.Tensor:
    wrapped = bias.as_subclass(_WrappedBias)
    wrapped._posgen_record = record
    return wrapped


#: ``on_call(layer, attention, kwargs) -> record``: for one call of a layer's attention
#: module (``kwargs``: the keywords it was called with), the function its bias's
#: ``baddbmm`` hands ``(bias, W, q, kᵀ, β, α)`` to (``bias`` [B·H, 1, K] plain, ``W``
#: [B·H, n, K] the model's logits, ``q`` [B·H, n, d], ``kᵀ`` [B·H, d, K]); it returns the
#: logits the model goes on with, None for its own W.
OnCall = Callable[[int, torch.nn.Module, dict], Callable[..., torch.Tensor | None]]


@contextmanager
def alibi_bias_calls(
    model: torch.nn.Module, on_call: OnCall, layers: Sequence[int] | None = None
) -> Iterator[None]:
    """Within the block, the attention module of each layer in ``layers`` (None: every
    layer) of the ALiBi ``model`` is handed its bias wrapped: its ``baddbmm`` (the
    model's own logits) calls ``on_call``'s function. A call of the module that computes
    no logits through it is refused (a transformers release whose BLOOM attention no
    longer calls ``alibi.baddbmm`` would otherwise pass unseen)."""
    family = position_family_of(model)
    name = family.bias_argument
    called: list[bool] = []

    def hooks_for(layer: int, attention: torch.nn.Module):
        def pre_hook(module, args, kwargs):
            record = on_call(layer, attention, kwargs)
            called.append(False)

            def seen(*given) -> torch.Tensor | None:
                called[-1] = True
                return record(*given)

            return args, {**kwargs, name: _wrapped(kwargs[name], seen)}

        def post_hook(module, args, kwargs, output):
            if not called.pop():
                raise RuntimeError(
                    f"{type(module).__name__} did not compute its logits as {name}.baddbmm"
                    "(q, kᵀ); posgen is tested with transformers 5.24's BLOOM attention"
                )

        return pre_hook, post_hook

    chosen = set(range(len(family.blocks(model)))) if layers is None else set(layers)
    with ExitStack() as stack:
        for layer, block in enumerate(family.blocks(model)):
            if layer not in chosen:
                continue
            pre, post = hooks_for(layer, block.self_attention)
            handles = (
                block.self_attention.register_forward_pre_hook(pre, with_kwargs=True),
                block.self_attention.register_forward_hook(post, with_kwargs=True),
            )
            for handle in handles:
                stack.callback(handle.remove)
        yield
