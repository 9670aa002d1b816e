"""``posgen run --kinds depth --depth-lengths L1,L2,...``: context length, the depth
sweep's second axis (docs/depth.md).

Each length is a fraction of the model's trained context C in (0, 1] (``0.25``, ``1.0``:
written with a decimal point) or a number of tokens (an integer > 1, ``512``). Per
built-in depth task and length the sweep runs the variant ``<task>_n<N>``, N from
:func:`posgen.tasks.depth_lengths.passages_for_length` with the model's own tokenizer;
the model's config and tokenizer are read here, before any weights load. One model per
run (its random-init twin beside it): each tokenizer and C give their own passage counts.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import replace
from typing import NamedTuple

from posgen.harness.loading.load import load_config, load_tokenizer
from posgen.harness.model_side.family import length_limit, trained_context
from posgen.harness.run.options import PlanError
from posgen.results.folder.config import ModelEntry
from posgen.results.folder.depth_config import DepthLength, DepthSweep
from posgen.tasks import depth_suite
from posgen.tasks.depth_lengths import passages_for_length, tokens_for_fraction
from posgen.tasks.depth_protocol import DepthTaskError

FLAG = "--depth-lengths"
_TOKENS = re.compile(r"^\d+$")


class Asked(NamedTuple):
    """One length as given: a fraction of C, or a number of tokens (the other None)."""

    text: str
    fraction: float | None
    tokens: int | None


def parse_lengths(text: str) -> tuple[Asked, ...]:
    """``"0.25,0.5,512"`` -> the lengths asked, each checked (one line, what to give)."""
    values = [v.strip() for v in text.split(",") if v.strip()]
    if not values:
        raise PlanError(f"{FLAG}: give fractions of the context C or token counts, e.g. 0.25,0.5")
    return tuple(_parse_one(v) for v in dict.fromkeys(values))


def _parse_one(value: str) -> Asked:
    if _TOKENS.match(value):
        if int(value) > 1:
            return Asked(value, None, int(value))
    else:
        try:
            fraction = float(value)
        except ValueError:
            fraction = -1.0
        if 0 < fraction <= 1:
            return Asked(value, fraction, None)
    raise PlanError(
        f"{FLAG}: {value!r} is neither a fraction of the context C in (0, 1] (with a decimal "
        "point: 0.5, 1.0) nor a number of tokens > 1 (an integer: 512)"
    )


def check_lengths(text: str | None, suite_tasks: Sequence[str] | None, account: int) -> None:
    """Refuse ``--depth-lengths`` beside a ``--suite`` task that is not built in (only
    the built-in depth tasks have length variants) or ``--depth-account``, or malformed."""
    if text is None:
        return
    parse_lengths(text)
    own = [t for t in suite_tasks or () if t not in depth_suite.TASKS]
    if own:
        raise PlanError(
            f"{FLAG}: only the built-in depth tasks ({', '.join(depth_suite.TASKS)}) have "
            f"length variants; {own[0]!r} is not one: leave it out of --suite or drop {FLAG}"
        )
    if account:
        raise PlanError(
            f"{FLAG}: the decomposition's account runs at the tasks' default lengths; "
            f"drop --depth-account or {FLAG}"
        )


def with_lengths(
    depth: DepthSweep | None, text: str | None, models: Sequence[ModelEntry]
) -> DepthSweep | None:
    """``depth`` with its tasks replaced by the variants of ``--depth-lengths`` ``text``
    for the run's one model (its config and tokenizer read, no weights), the lengths
    recorded; ``depth`` as it is without the flag."""
    if depth is None or text is None:
        return depth
    asked = parse_lengths(text)
    entry = _one_model(models)
    config = load_config(entry)
    context = trained_context(config)
    targets = sorted((_target(a, context, entry.label), a) for a in asked)
    hard = length_limit(config)  # the most one forward takes, where positions bound it
    tokenizer = load_tokenizer(entry)

    def count_tokens(text: str) -> int:
        return len(tokenizer(text).input_ids)

    lengths = []
    for task in depth.tasks:
        for tokens, a in targets:
            try:
                choice = passages_for_length(task, tokens, count_tokens, hard and hard[1])
            except DepthTaskError as e:
                raise PlanError(f"{FLAG} {a.text}: {e}") from None
            lengths.append(DepthLength(a.text, a.fraction, tokens, task, choice.task,
                                       choice.n_passages, round(choice.mean_tokens, 1),
                                       choice.max_tokens))  # fmt: skip
    tasks = tuple(dict.fromkeys(length.task for length in lengths))
    return replace(depth, tasks=tasks, context=context and context[1], lengths=tuple(lengths))


def _one_model(models: Sequence[ModelEntry]) -> ModelEntry:
    real = [m for m in models if not m.random_init]
    if len(real) != 1:
        raise PlanError(
            f"{FLAG}: one model per run (each model's tokenizer and trained context give "
            f"its own passage counts); got {len(real)} ({', '.join(m.label for m in real)}): "
            "run each in its own posgen run"
        )
    return real[0]


def _target(asked: Asked, context: tuple[str, int] | None, label: str) -> int:
    """The length in tokens; refused past the model's trained context C."""
    if context is None:
        if asked.tokens is None:
            raise PlanError(
                f"{FLAG} {asked.text}: {label}'s config names no trained context "
                "(max_position_embeddings); give the length in tokens"
            )
        return asked.tokens
    field, c = context
    if asked.tokens is None:
        return tokens_for_fraction(asked.fraction, c)  # type: ignore[arg-type]
    if asked.tokens > c:
        raise PlanError(
            f"{FLAG} {asked.text}: {asked.tokens} tokens is past {label}'s trained context "
            f"C = {c} ({field}); ask for at most {c} tokens or a fraction of C up to 1.0"
        )
    return asked.tokens
