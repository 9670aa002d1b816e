"""Context length, the depth sweep's second axis: a length in tokens (or a fraction of a
model's trained context C) mapped to the number of passages of a built-in depth task.

A built-in depth task's document at N passages (:mod:`posgen.tasks.depth_suite`) grows
with N; :func:`passages_for_length` finds, with the model's own token counter, the
largest N whose documents' mean context length (prompt only, as the task renders it)
is at most the target, then names the variant (``posgen_kv_n120``). Pure: the caller
passes ``count_tokens(text) -> int`` (e.g. ``lambda s: len(tok(s).input_ids)``).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from posgen.tasks import depth_suite
from posgen.tasks.depth_protocol import DepthTaskError

Counter = Callable[[str], int]


def tokens_for_fraction(fraction: float, context: int) -> int:
    """``round(fraction · context)`` tokens; refuses a fraction outside (0, 1] or a
    context that is not a positive integer."""
    if isinstance(context, bool) or not isinstance(context, int) or context < 1:
        raise DepthTaskError(f"a model's context must be a positive integer, got {context!r}")
    if (
        isinstance(fraction, bool)
        or not isinstance(fraction, (int, float))
        or not (0 < fraction <= 1)
    ):
        raise DepthTaskError(
            f"a length as a fraction of the context is in (0, 1], got {fraction!r}"
        )
    return max(1, round(fraction * context))


@dataclass(frozen=True)
class LengthChoice:
    """The passages chosen for a target length and what they come to in tokens."""

    task: str  # the variant's name, e.g. posgen_kv_n120
    base_task: str
    n_passages: int
    target_tokens: int
    mean_tokens: float  # mean context length of the documents at n_passages
    max_tokens: int  # the longest context at n_passages


def mean_tokens(task: str, n: int, count_tokens: Counter) -> tuple[float, int]:
    """Mean and largest context length in tokens of the task's documents at n passages."""
    lengths = [
        count_tokens(depth_suite.render_context(task, doc))
        for doc in depth_suite.documents(task, n)
    ]
    return sum(lengths) / len(lengths), max(lengths)


def passages_for_length(
    task: str, tokens: int, count_tokens: Counter, limit: int | None = None
) -> LengthChoice:
    """The largest N (passages per document) of built-in depth task ``task`` whose mean
    context length is at most ``tokens``; binary search (the length grows with N).

    Refuses (:class:`DepthTaskError`, one line) a length below the task's two-passage
    documents, past what its items' pools hold (the longest it can reach, in these
    tokens), or, with ``limit`` (the tokens one forward of the model takes), a length
    whose longest document would not fit."""
    if task not in depth_suite.TASKS:
        raise DepthTaskError(
            f"{task!r} is not a built-in depth task ({', '.join(depth_suite.TASKS)})"
        )
    if isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 1:
        raise DepthTaskError(
            f"{task}: a length in tokens must be a positive integer, got {tokens!r}"
        )
    if limit is not None and tokens > limit:
        raise DepthTaskError(
            f"{task}: {tokens} tokens is past what the model holds ({limit} tokens in one "
            "forward); ask for at most that"
        )
    lo, hi = 2, depth_suite.MAX_PASSAGES[task]
    shortest, _ = mean_tokens(task, lo, count_tokens)
    if shortest > tokens:
        raise DepthTaskError(
            f"{task}: {tokens} tokens is shorter than its 2-passage documents "
            f"({shortest:.0f} tokens on average); ask for more"
        )
    longest, _ = mean_tokens(task, hi, count_tokens)
    if tokens > longest + longest / hi:  # more than one passage past the pool's end
        raise DepthTaskError(
            f"{task}: {tokens} tokens is past what its items hold ({hi} passages, "
            f"{longest:.0f} tokens on average with this tokenizer); ask for at most that"
        )
    while lo < hi:  # invariant: mean(lo) <= tokens
        mid = (lo + hi + 1) // 2
        if mean_tokens(task, mid, count_tokens)[0] <= tokens:
            lo = mid
        else:
            hi = mid - 1
    mean, most = mean_tokens(task, lo, count_tokens)
    if limit is not None and most > limit:
        raise DepthTaskError(
            f"{task}: at {lo} passages its longest document is {most} tokens, past what the "
            f"model holds ({limit}); ask for a shorter length"
        )
    return LengthChoice(depth_suite.variant_name(task, lo), task, lo, tokens, mean, most)
