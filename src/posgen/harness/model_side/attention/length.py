"""The length schemes that replace the attention function, behind one entry point.

``lambda:G,W`` (:mod:`.lambda_attention`) and ``infllm`` (:mod:`.infllm`) each
swap the model's attention through :mod:`.wrapper`. Callers that
run a length scheme (hf-posgen's forward, ``posgen length``) enter
:func:`length_attention`; the decomposition's capture asks :func:`active_band` whether
the forward runs one of them, and :func:`length_output` for its outputs.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch

from posgen.harness.model_side.attention import infllm
from posgen.harness.model_side.attention import lambda_attention as lam
from posgen.perturbations.length import LengthInfLLM, LengthLambda, LengthPerturbation


@contextmanager
def length_attention(
    model: torch.nn.Module,
    scheme: LengthPerturbation,
    block_size: int | None = None,
    lengths: tuple[int, ...] | None = None,
) -> Iterator[None]:
    """Within the block ``model`` runs ``scheme``'s attention (Λ or InfLLM).
    ``block_size``: Λ's query block; ``lengths``: the rows' real lengths (InfLLM's
    retrieval reads only real queries; Λ needs none)."""
    if isinstance(scheme, LengthInfLLM):
        with infllm.infllm_attention(model, scheme, lengths):
            yield
    elif isinstance(scheme, LengthLambda):
        with lam.lambda_attention(model, scheme, block_size):
            yield
    else:
        raise ValueError(f"length={scheme.to_string()} does not replace the attention function")


def config_refusal(scheme: LengthPerturbation, config: Any) -> str | None:
    """Why ``scheme``'s attention cannot run a model of ``config`` (read before any
    weight loads), or None: Λ's refusals (:func:`.lambda_attention.config_refusal`) for
    both, and for InfLLM a config without RoPE (no ``rope_parameters``/``rope_theta``)."""
    if not scheme.uses_attention:
        return None
    reason = lam.config_refusal(config)
    if reason is not None and isinstance(scheme, LengthInfLLM):
        return reason.replace("lambda attention", "infllm attention")
    rope = getattr(config, "rope_parameters", None) or getattr(config, "rope_theta", None)
    if reason is None and isinstance(scheme, LengthInfLLM) and not rope:
        kind = getattr(config, "model_type", type(config).__name__)
        return f"infllm needs a model with rotary position embeddings; this {kind!r} has none"
    return reason


def active_scheme() -> LengthPerturbation | None:
    """The attention-replacing length scheme of the enclosing block, or None."""
    return infllm.active_scheme() or lam.active_scheme()


def active_band(n: int) -> int | None:
    """W of the band ``0 ≤ i − j < W`` attended at true distances (the part a fit of
    q·k describes) when a forward of ``n`` tokens runs Λ or InfLLM, None when it runs
    plain causal attention (no such block, or ``n ≤ W``)."""
    scheme = active_scheme()
    if isinstance(scheme, LengthInfLLM):
        window = scheme.n_local
    elif isinstance(scheme, LengthLambda):
        window = scheme.window
    else:
        return None
    return window if n > window else None


def active_band_label() -> str:
    """How a fit of :func:`active_band`'s band is labelled in ``fit_mask``: ``infllm-local``
    (InfLLM's local window) or ``lambda-band`` (Λ's local band)."""
    return "infllm-local" if isinstance(active_scheme(), LengthInfLLM) else "lambda-band"


def length_output(module: torch.nn.Module, query, key, value, **kwargs: Any) -> torch.Tensor:
    """The enclosing scheme's attention output ``[B, T, H, d]`` for a full forward longer
    than its window (:func:`.lambda_attention.lambda_output`,
    :func:`.infllm.infllm_output`)."""
    if infllm.active_scheme() is not None:
        return infllm.infllm_output(module, query, key, value, **kwargs)
    return lam.lambda_output(module, query, key, value, **kwargs)
