"""``posgen run --kinds depth``: the evidence-depth cells' settings (depths, tasks,
documents), each checked before any model loads (docs/depth.md).

The depths are where the evidence sits (0: the first passage, 1: the last before the
question), not a rate: the cells they make stay out of the rate axes. The tasks are
posgen's built-in depth tasks, or the ``--suite`` tasks when a suite is given, each of
which must declare the field protocol (``metadata.posgen_depth``).

Light imports only (lm-eval's task manager only for a ``--suite`` of other tasks).
"""

from __future__ import annotations

import argparse
from collections.abc import Callable

from posgen.harness.run.depth_lengths import check_lengths
from posgen.harness.run.options import PlanError
from posgen.results.folder.config import DepthSweep
from posgen.tasks import depth_suite
from posgen.tasks.depth_protocol import (
    PROTOCOL_KEY,
    DepthTaskError,
    declaration_example,
    declared_fields,
)

KIND = "depth"
# the built-in log-likelihood depth tasks, which the decomposition's account runs on
ACCOUNT_TASKS = depth_suite.LOGLIKELIHOOD_TASKS
ACCOUNT_DOCS = 8  # --depth-account without a number
DEFAULT_DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)
QUICK_DEPTHS = (0.0, 0.5, 1.0)  # the ends and the middle: the gap, and no more
# documents per depth task (the built-in tasks have 24 items each)
LIMITS = {"default": 24, "quick": 8}


def parse_depths(text: str | None, quick: bool) -> tuple[float, ...]:
    """``--depths 0,0.5,1`` -> the sorted depths, each in [0, 1] (the preset's without)."""
    if text is None:
        return QUICK_DEPTHS if quick else DEFAULT_DEPTHS
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise PlanError(f"--depths: {text!r} is not a comma-separated list of numbers") from None
    bad = [v for v in values if not 0 <= v <= 1]
    if bad:
        raise PlanError(
            f"--depths: every depth must be in [0, 1] (0: the evidence first, 1: last "
            f"before the question); got {bad}"
        )
    if not values:
        raise PlanError("--depths: give at least one depth in [0, 1], e.g. 0,0.5,1")
    return tuple(sorted(set(values)))


def depth_sweep(
    args: argparse.Namespace,
    kinds: tuple[str, ...],
    suite_tasks: tuple[str, ...] | None,
    task_config: Callable[[str], dict] | None,
) -> DepthSweep | None:
    """The run's depth cells, or None without ``--kinds depth`` (then ``--depths`` is
    refused). ``suite_tasks``: the ``--suite`` tasks (None: the offline suite, so the
    built-in depth tasks); ``task_config`` reads a task's config (its metadata), for a
    suite task that is not built in."""
    depths_arg = getattr(args, "depths", None)
    account = getattr(args, "depth_account", None)
    lengths = getattr(args, "depth_lengths", None)
    if KIND not in kinds:
        if depths_arg is not None:
            raise PlanError("--depths needs --kinds depth (e.g. --kinds text,depth)")
        if account is not None:
            raise PlanError("--depth-account needs --kinds depth (e.g. --kinds depth)")
        if lengths is not None:
            raise PlanError("--depth-lengths needs --kinds depth (e.g. --kinds depth)")
        return None
    depths = parse_depths(depths_arg, args.quick)
    docs = account_docs(account, suite_tasks)
    check_lengths(lengths, suite_tasks, docs)  # the variants: resolve.py, with the tokenizer
    if suite_tasks is None:
        return DepthSweep(depths, depth_suite.TASKS, docs)
    for task in suite_tasks:
        if task not in depth_suite.TASKS and task_config is not None:
            check_protocol(task, task_config)
    return DepthSweep(depths, tuple(suite_tasks), docs)


def account_docs(value: int | None, suite_tasks: tuple[str, ...] | None) -> int:
    """``--depth-account [N]`` -> documents per task of the account (0 without it)."""
    if value is None:
        return 0
    if value < 1:
        raise PlanError(f"--depth-account: documents per task must be at least 1; got {value}")
    tasks = depth_suite.TASKS if suite_tasks is None else suite_tasks
    if not any(t in ACCOUNT_TASKS for t in tasks):
        raise PlanError(
            "--depth-account: the account runs on the built-in log-likelihood depth tasks "
            f"({', '.join(ACCOUNT_TASKS)}); none is in --suite"
        )
    return value


def check_protocol(task: str, task_config: Callable[[str], dict]) -> None:
    """Refuse a task whose config declares no ``metadata.posgen_depth`` (or a malformed one)."""
    try:
        metadata = task_config(task).get("metadata")
    except (KeyError, ValueError):
        metadata = None  # a group or tag: not one task's config
    try:
        fields = declared_fields(task, metadata)
    except DepthTaskError as e:
        raise PlanError(f"--kinds depth: {e}") from None
    if fields is None:
        raise PlanError(
            f"--kinds depth: task {task!r} declares no metadata.{PROTOCOL_KEY} (which doc "
            f"fields are the passages, the evidence and the question); add to its YAML: "
            f"{declaration_example()} (docs/depth.md), or leave it out of --suite"
        )


def depth_limit(task: str, asked: int | None, preset: str) -> int:
    """Documents of a depth task: ``--limit`` or the preset's, at most a built-in task's
    24 (a length variant's too)."""
    limit = asked or LIMITS[preset]
    variant = depth_suite.parse_variant(task)  # posgen_kv_n120: posgen_kv's documents
    base = variant[0] if variant is not None else task
    return min(limit, len(depth_suite.documents(base))) if base in depth_suite.TASKS else limit
