"""Reuse of the unperturbed forward below the first perturbed layer (``posgen layers``).

With ``layers=`` every layer before the first chosen one computes exactly what plain
``hf`` computes (:mod:`posgen.harness.model_side.positions.layers`: the model's own angles, no hook acts there). A
layer profile scores the same batches once plain and then once per layer, so the
decoder layers below layer L need not run again for cell L: :class:`PrefixReuse`
records, in the plain pass, what each decoder layer returned for each batch (keyed by
the batch's token ids and shape), and in a later pass whose first perturbed layer is L
makes layers 0..L−1 hand back those recorded outputs instead of computing them. Layers
L.. run for real, inside the model's own forward (embeddings, masks, rotary embedding
and every later layer are the model's code, unchanged), on the recorded input of layer L,
which is bit for bit the input they would have computed. On average this halves the
decoder work of a 30-layer profile.

A batch that was not recorded (e.g. a rerun that resumes after the plain cell) runs the
whole stack. :meth:`PrefixReuse.verify` runs one batch both ways and compares the logits
bit for bit; ``posgen layers`` calls it once per run and turns reuse off, saying so, if
they differ (a model family whose layers pass state to each other outside the hidden
states, e.g. a shared KV cache across layers).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Iterator
from contextlib import ExitStack, contextmanager
from typing import Any

import torch

from posgen.compat import forward_replaced
from posgen.harness.model_family import family_of


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The decoder layers in order: the parent module of each attention module that
    knows its ``layer_idx`` (``model.layers.3`` for ``model.layers.3.self_attn``)."""
    found = {id(m) for m in family_of(model).attention_modules(model)}
    by_layer: dict[int, torch.nn.Module] = {}
    for name, module in model.named_modules():
        if id(module) in found and getattr(module, "layer_idx", None) is not None:
            parent = name.rpartition(".")[0]
            by_layer[int(module.layer_idx)] = model.get_submodule(parent)
    return [by_layer[i] for i in sorted(by_layer)]


def batch_key(inps: torch.Tensor) -> bytes:
    """The key of one batch: its shape and token ids."""
    digest = hashlib.sha256(repr(tuple(inps.shape)).encode())
    digest.update(inps.detach().to("cpu", torch.int64).contiguous().numpy().tobytes())
    return digest.digest()


class PrefixReuse:
    """Per batch, what each decoder layer of the plain forward returned."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.layers = decoder_layers(model)
        self._outputs: dict[bytes, list[Any]] = {}
        self.enabled = True
        self.checked = False
        self.note = "on: layers below the first perturbed one reuse the plain forward"
        self.reused_layers = 0  # layer forwards skipped, for the run's log

    def __len__(self) -> int:
        return len(self._outputs)

    def has(self, inps: torch.Tensor) -> bool:
        return batch_key(inps) in self._outputs

    @contextmanager
    def record(self, inps: torch.Tensor) -> Iterator[None]:
        """Within the block (one plain forward of ``inps``), keep every layer's output."""
        if not self.enabled:
            yield
            return
        outputs: list[Any] = [None] * len(self.layers)

        def keeper(index: int):
            def hook(module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
                outputs[index] = output

            return hook

        handles = [
            layer.register_forward_hook(keeper(i), with_kwargs=True)
            for i, layer in enumerate(self.layers)
        ]
        try:
            yield
        finally:
            for h in handles:
                h.remove()
        if all(o is not None for o in outputs):
            self._outputs[batch_key(inps)] = outputs

    @contextmanager
    def replay(self, inps: torch.Tensor, first: int) -> Iterator[bool]:
        """Within the block, layers ``0..first−1`` return their recorded outputs for
        ``inps`` without computing (yields True), when ``inps`` was recorded; else (or
        with ``first`` 0) nothing changes (yields False)."""
        outputs = self._outputs.get(batch_key(inps)) if self.enabled and first > 0 else None
        if outputs is None:
            yield False
            return
        with ExitStack() as stack:
            for i in range(first):
                out = outputs[i]
                if i == first - 1:  # the input of the first layer that runs: a fresh copy
                    out = _clone(out)
                stack.enter_context(forward_replaced(self.layers[i], _returning(out)))
            self.reused_layers += first
            yield True

    def plain_forward(
        self, inps: torch.Tensor, forward: Callable[[], torch.Tensor]
    ) -> torch.Tensor:
        """The logits of ``forward()``, the plain forward of ``inps``, with every layer's
        output recorded; the first recorded batch is checked (:meth:`check`)."""
        with self.record(inps):
            logits = forward()
        if not self.checked and self.has(inps):
            self.check(inps, logits, forward)
        return logits

    def check(self, inps: torch.Tensor, logits: torch.Tensor, forward) -> bool:
        """Once: replay all layers but the last for the just-recorded ``inps`` and
        compare ``forward()``'s logits with the recorded pass's ``logits`` bit for bit;
        on a mismatch turn reuse off (``note`` says why). Returns whether reuse is on."""
        self.checked = True
        counted = self.reused_layers
        with self.replay(inps, len(self.layers) - 1) as reused:
            again = forward() if reused else None
        self.reused_layers = counted  # layer forwards skipped in the cells only
        if again is not None and not torch.equal(again, logits):
            self.enabled = False
            self._outputs.clear()
            diff = float((again.float() - logits.float()).abs().max())
            self.note = (
                "off: replaying the plain forward's layer outputs did not reproduce its "
                f"logits (max difference {diff:.3g}); every cell runs the whole stack"
            )
        return self.enabled

    def clear(self) -> None:
        self._outputs.clear()


def _returning(output: Any) -> Callable[..., Any]:
    """A layer forward that returns ``output`` without computing."""
    return lambda *args, **kwargs: output


def _clone(output: Any) -> Any:
    if isinstance(output, torch.Tensor):
        return output.clone()
    if type(output) is tuple:
        return tuple(_clone(o) for o in output)
    return output
