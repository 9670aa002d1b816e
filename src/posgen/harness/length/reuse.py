"""The prefix that ``posgen length``'s schemes share, computed once per document.

Under ``none`` and ``lambda:G,W`` every query i < W sees all its keys at their true
distances, so on tokens [0, P) with ``P = min(C, every sharing Λ's W)`` they all equal the
plain model's causal attention: hidden states, KV cache, NLL and attention outputs there
are the same. :func:`run_prefix` runs [0, P) once with a KV cache (transformers'
``DynamicCache``), keeping the NLL of the targets its states predict (tokens 1 … P) and
every layer's attention outputs; :func:`run_suffix` continues one scheme on [P, n) from a
copy of that cache, in chunks of ``SUFFIX_CHUNK`` queries, each with its explicit causal
mask ``[1, 1, q, kv]`` (additive, in the model's dtype: torch's CPU sdpa then runs its
fused kernel on it as given, with no bool-to-float conversion per layer), and joins NLL
and drift over the whole document. Only without a ``--positions`` scheme (the cache holds
keys at the plain positions); rope scalings and ``infllm`` run their own whole forward.
"""

from __future__ import annotations

import copy
import inspect
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from posgen.harness.length.drift import (
    attention_modules,
    cosines_to,
    drift_sums,
    reference_direction,
)
from posgen.harness.length.nll import check_document, fill_head_nll
from posgen.harness.model_side import door
from posgen.harness.model_side.perturbation import ModelPerturbation
from posgen.perturbations.length import LengthLambda, LengthNone, LengthPerturbation
from posgen.results.scores.length_drift import DriftSums

SUFFIX_CHUNK = 1024  # queries per suffix forward: its mask is SUFFIX_CHUNK × n floats


def sharing(schemes: list[LengthPerturbation]) -> list[LengthPerturbation]:
    """The schemes that equal the plain model on a leading prefix (``none``, ``lambda``)."""
    return [s for s in schemes if isinstance(s, LengthNone | LengthLambda)]


def shared_length(schemes: list[LengthPerturbation], trained_context: int) -> int:
    """P: the largest length on which every one of ``schemes`` (sharing ones) equals the
    plain model's full causal attention, capped at C."""
    windows = [s.window for s in schemes if isinstance(s, LengthLambda)]
    return min([trained_context, *windows])


class LayerOutputs:
    """Each layer's attention outputs over consecutive forwards of one document (after
    ``o_proj``, before the residual add, as :mod:`.drift` reads them), reduced to the
    per-token ``(c_t, log‖o_t‖)`` of :func:`.drift.token_cosines` as soon as the layer's
    reference [C/2, C) is complete; before that the outputs ``[m, hidden]`` are kept."""

    def __init__(self, model: torch.nn.Module, trained_context: int) -> None:
        self.modules = attention_modules(model)
        self.context = trained_context
        self.chunks: dict[int, list[Any]] = {int(m.layer_idx): [] for m in self.modules}
        self.mean: dict[int, torch.Tensor] = {}  # layer → its reference mean direction m

    def fork(self) -> LayerOutputs:
        other = copy.copy(self)
        other.chunks = {i: list(c) for i, c in self.chunks.items()}
        other.mean = dict(self.mean)
        return other

    def _add(self, layer: int, out: torch.Tensor) -> None:
        if layer in self.mean:
            self.chunks[layer].append(cosines_to(out, self.mean[layer]))
            return
        self.chunks[layer].append(out.detach())
        if sum(c.shape[0] for c in self.chunks[layer]) >= self.context:
            self._reduce(layer, self.context)

    def _reduce(self, layer: int, end: int) -> None:
        """The mean direction over [C/2, end) and every kept output reduced with it."""
        o = torch.cat(self.chunks[layer])
        self.mean[layer] = reference_direction(o, (self.context // 2, end))
        self.chunks[layer] = [cosines_to(o, self.mean[layer])]

    @contextmanager
    def capture(self) -> Iterator[None]:
        def hook(module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
            out = output[0] if isinstance(output, tuple) else output
            self._add(int(module.layer_idx), out[0])

        handles = [m.register_forward_hook(hook, with_kwargs=True) for m in self.modules]
        try:
            yield
        finally:
            for h in handles:
                h.remove()

    def drift(self, width: int, n_buckets: int) -> DriftSums | None:
        """The document's drift sums, as :func:`.drift.drift_capture` gives them for one
        whole forward (None where n ≤ C/2)."""
        n = sum(
            c[0].size if isinstance(c, tuple) else c.shape[0]
            for c in next(iter(self.chunks.values()))
        )
        if n <= self.context // 2:
            return None
        for layer in self.chunks:
            if layer not in self.mean:  # n < C: the reference is [C/2, n)
                self._reduce(layer, n)
        per_layer = [
            (np.concatenate([c for c, _ in chunks]), np.concatenate([g for _, g in chunks]))
            for chunks in (self.chunks[i] for i in sorted(self.chunks))
        ]
        ref = (self.context // 2, min(self.context, n))
        return drift_sums(per_layer, ref, self.context, width, n_buckets)


@dataclass
class SharedPrefix:
    """The prefix [0, P) of one document: NLL ``[n]`` (NaN past token P), KV cache,
    attention outputs, its seconds and the schemes it serves."""

    tokens: int
    nll: np.ndarray
    cache: Any
    outputs: LayerOutputs
    seconds: float
    shared_by: list[str]


def _cache_kwargs(model: Any, cache: Any) -> dict[str, Any]:
    """The KV cache argument of ``model.base_model`` (``cache`` in newer transformers,
    ``past_key_values`` before)."""
    params = inspect.signature(model.base_model.forward).parameters
    name = "cache" if "cache" in params else "past_key_values"
    return {name: cache, "use_cache": True}


def run_prefix(
    model: Any, ids: torch.Tensor, tokens: int, chunk: int, shared_by: list[str], context: int
) -> SharedPrefix:
    """The plain model on ``ids[:, :tokens]`` (``ids`` ``[1, n]``) with a KV cache;
    ``context``: C, the drift's reference [C/2, C)."""
    from transformers import DynamicCache

    n = check_document(model, ids)
    begin = time.perf_counter()
    nll, cache, outputs = np.full(n, np.nan), DynamicCache(), LayerOutputs(model, context)
    with torch.no_grad(), door.forward(model), outputs.capture():
        run = model.base_model(input_ids=ids[:, :tokens], **_cache_kwargs(model, cache))
        fill_head_nll(nll, model, run.last_hidden_state[0], ids, 0, chunk)
    return SharedPrefix(tokens, nll, cache, outputs, time.perf_counter() - begin, shared_by)


def causal_offset_mask(q: int, kv: int, like: torch.Tensor) -> torch.Tensor:
    """Additive mask ``[1, 1, q, kv]``: 0 where key j ≤ kv − q + r for query r, −inf after."""
    i = torch.arange(kv - q, kv, device=like.device)[:, None]
    j = torch.arange(kv, device=like.device)[None]
    mask = torch.zeros(q, kv, dtype=like.dtype, device=like.device)
    return mask.masked_fill(j > i, float("-inf"))[None, None]


def run_suffix(
    model: Any, ids: torch.Tensor, prefix: SharedPrefix, scheme: LengthPerturbation, config: Any
) -> tuple[np.ndarray, DriftSums | None, float]:
    """``scheme`` on ``ids[:, P:]`` after a copy of ``prefix``'s cache: the whole
    document's NLL ``[n]``, its drift sums and the suffix's seconds."""
    begin, n = time.perf_counter(), ids.shape[1]
    nll, outputs = prefix.nll.copy(), prefix.outputs.fork()
    cache = copy.deepcopy(prefix.cache)
    like = model.get_output_embeddings().weight
    p = ModelPerturbation(seed=config.seed, length=scheme)
    with (
        torch.no_grad(),
        door.forward(
            model, p, door.plan_forward(ids, p, model=model), block_size=config.block_size
        ),
        outputs.capture(),
    ):
        for start in range(prefix.tokens, n, SUFFIX_CHUNK):
            stop = min(n, start + SUFFIX_CHUNK)
            mask = causal_offset_mask(stop - start, stop, like)
            run = model.base_model(
                input_ids=ids[:, start:stop], attention_mask=mask, **_cache_kwargs(model, cache)
            )
            fill_head_nll(nll, model, run.last_hidden_state[0], ids, start, config.chunk)
    drift = outputs.drift(config.bucket_width, config.n_buckets)
    return nll, drift, time.perf_counter() - begin
