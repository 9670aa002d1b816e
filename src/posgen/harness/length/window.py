"""The in-distribution window: every token past C scored with (nearly) C−1 tokens before
it, at the model's own positions 0 … C−1. Content equal, position within C.

For a document ``x_0 … x_{n−1}`` and trained context C, the in-distribution NLL of a
token t ≥ C is

    nll_win[t] = −log p(x_t | x_a … x_{t−1}),   the window x_a … x_{a+C−1} run alone
                                                 at positions 0 … C−1, t ∈ [a, a+C)

With a stride S the targets ``[C, n)`` are cut into blocks ``[lo, hi)`` of S tokens
(:func:`window_plan`); block ``[lo, hi)`` is scored by the single window ``a = hi − C``
(the C tokens that end at the block's last target), so target t sees

    t − a = t − hi + C   ∈ [C − S, C − 1]   tokens of context

(exactly C − 1 for the block's last token; S = 1 is one window per token). Cost:
``⌈(n − C) / S⌉`` forwards of C tokens, the LM head on S positions each.

Why not one forward with a rolling KV cache: RoPE makes a layer's *first* attention
relative (re-basing the cached keys' positions would reproduce it), but from the second
layer on a cached key is a function of the hidden state of its token, which in a longer
forward has attended further back than ``a``; a window that starts at ``a`` must
recompute every layer of its C tokens. So the windows are separate forwards, and S trades
cost for how close the context is to C − 1.

The pass depends on neither the length scheme nor a position scheme (it is the model as
trained, on its own positions), so ``posgen length`` computes it once per document and
every scheme of the run is compared with it (:mod:`posgen.results.scores.length_window`).
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from posgen.harness.length.nll import check_document, fill_head_nll
from posgen.harness.model_side import door


def window_plan(n: int, c: int, stride: int) -> list[tuple[int, int, int]]:
    """``(a, lo, hi)`` per window: tokens ``[a, a + C)``, targets ``[lo, hi)``, ``a = hi − C``;
    the targets tile ``[C, n)`` in blocks of ``stride`` (the last one shorter)."""
    if not 1 <= stride <= c - 1:
        raise ValueError(f"window stride must be in [1, C − 1] = [1, {c - 1}], got {stride}")
    plan = []
    for lo in range(c, n, stride):
        hi = min(n, lo + stride)
        plan.append((hi - c, lo, hi))
    return plan


def window_nll(
    model: Any, input_ids: torch.Tensor, c: int, stride: int, chunk: int = 1024
) -> np.ndarray:
    """``nll_win`` ``[n]`` (float64) for ``input_ids`` ``[1, n]``: NaN before C (see the
    module doc); the LM head runs on ``chunk`` positions at a time. Plain model: no length
    or position scheme may be active."""
    n = check_document(model, input_ids)
    out = np.full(n, np.nan)
    with torch.no_grad(), door.forward(model):
        for a, lo, hi in window_plan(n, c, stride):
            window = input_ids[:, a : a + c]  # [1, C], positions 0 … C−1
            hidden = model.base_model(input_ids=window).last_hidden_state[0]  # [C, hidden]
            # the state predicting x_t sits at window index t − a − 1
            fill_head_nll(out, model, hidden[lo - a - 1 : hi - a - 1], input_ids, lo - 1, chunk)
    return out


def context_range(c: int, stride: int) -> tuple[int, int]:
    """The fewest and most context tokens a scored target gets: ``(C − S, C − 1)``."""
    return c - stride, c - 1
