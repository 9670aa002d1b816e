"""Per-token negative log-likelihood by position: one forward per document.

For a document of n tokens ``x_0 … x_{n−1}``, position t (1 ≤ t < n) carries

    nll[t] = −log p(x_t | x_0 … x_{t−1})    (natural log, float64)

The decoder runs once (``model.base_model``, no attention mask, so sdpa uses its causal
kernel with no n × n mask); the LM head is then applied to the last hidden state
``[n, hidden]`` in chunks of ``chunk`` positions, so at most ``chunk × vocab`` logits exist
at a time (a 49k vocabulary × 16k positions would be 3.2 GB in float32). Models whose
head post-processes logits (final soft-capping, logit scales) are refused.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch


def head_refusal(config: Any) -> str | None:
    """Why posgen length cannot compute the logits of a model of ``config`` (read before
    any weight loads), or None: logits that are not ``lm_head(last hidden state)``."""
    for attr in ("final_logit_softcapping", "logit_scale", "logits_scaling"):
        value = getattr(config, attr, None)
        if value not in (None, 1, 1.0):
            return (
                f"posgen length computes logits as lm_head(hidden); this model has "
                f"{attr}={value}, which it does not reproduce"
            )
    return None


def check_plain_head(model: Any) -> None:
    """Refuse models whose logits are not ``lm_head(last hidden state)``."""
    reason = head_refusal(model.config)
    if reason is not None:
        raise RuntimeError(reason)
    if model.get_output_embeddings() is None:
        raise RuntimeError("posgen length needs a causal LM with an output embedding (LM head)")


def check_document(model: Any, input_ids: torch.Tensor) -> int:
    """``n`` for one document ``input_ids`` ``[1, n]`` on a model with a plain LM head;
    anything else raises."""
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise ValueError(f"input_ids must be [1, n], got {tuple(input_ids.shape)}")
    check_plain_head(model)
    return int(input_ids.shape[1])


def position_nll(model: Any, input_ids: torch.Tensor, chunk: int = 1024) -> np.ndarray:
    """``nll`` of shape ``[n]`` (float64) for ``input_ids`` ``[1, n]``; ``nll[0]`` is NaN
    (the first token has no prediction). Runs inside whatever hooks are active."""
    n = check_document(model, input_ids)
    out = np.full(n, np.nan)
    with torch.no_grad():
        hidden = model.base_model(input_ids=input_ids).last_hidden_state[0]  # [n, hidden]
        fill_head_nll(out, model, hidden, input_ids, 0, chunk)
    return out


def fill_head_nll(
    out: np.ndarray, model: Any, hidden: torch.Tensor, ids: torch.Tensor, start: int, chunk: int
) -> None:
    """``out[t + 1]`` for the states ``hidden [m, hidden]`` of tokens start … start + m − 1
    of ``ids`` ``[1, n]`` (each predicts the next token), the LM head on ``chunk`` states at
    a time, so at most ``chunk × vocab`` logits exist at once."""
    head, n = model.get_output_embeddings(), ids.shape[1]
    stop = min(n - 1, start + hidden.shape[0])
    for a in range(start, stop, chunk):
        b = min(stop, a + chunk)
        out[a + 1 : b + 1] = head_nll(head, hidden[a - start : b - start], ids[0, a + 1 : b + 1])


def head_nll(head: Any, hidden: torch.Tensor, targets: torch.Tensor) -> np.ndarray:
    """``−log softmax(head(hidden))[i, targets[i]]`` ``[m]`` (float64) for ``hidden``
    ``[m, hidden]`` (the states that predict ``targets`` ``[m]``); logits in float32."""
    logp = torch.log_softmax(head(hidden).float(), dim=-1)  # [m, vocab]
    return (-logp.gather(1, targets[:, None])[:, 0]).double().cpu().numpy()


def bucket_sums(values: np.ndarray, width: int, n_buckets: int) -> tuple[np.ndarray, np.ndarray]:
    """Sum and count of the finite ``values[t]`` per position bucket ``⌊t / width⌋``
    (``[n_buckets]`` each); positions past the last bucket are dropped."""
    t = np.arange(values.size)
    keep = np.isfinite(values) & (t < width * n_buckets)
    idx = t[keep] // width
    sums = np.bincount(idx, weights=values[keep], minlength=n_buckets)
    counts = np.bincount(idx, minlength=n_buckets).astype(np.int64)
    return sums, counts
