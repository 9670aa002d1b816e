"""The metrics of a run's tasks, read from their configs before any model loads: a task
none of whose metrics posgen can score is refused (``posgen run`` exits 2 naming them and
why), instead of failing its first cell after the model loaded."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from posgen.harness.run.options import PlanError
from posgen.results.folder.config import RunConfig


def check_run_metrics(config: RunConfig) -> None:
    """:func:`check_task_metrics` for the tasks of a run given by name (the offline
    suite's are posgen's own), through the task manager the run will use (built here,
    once per process, with the run's ``--include-path`` folders)."""
    if config.suite == "offline":
        return
    from posgen.harness.run.plan import shared_task_manager

    check_task_metrics(config.tasks, shared_task_manager(config.include_path))


def check_task_metrics(tasks: Iterable[str], task_manager: Any) -> None:
    """Refuse a task whose declared metrics (its ``metric_list`` under each filter, or
    lm-eval's defaults for its output type) posgen cannot score. A group or tag is not
    one task's config: its tasks are checked when their cells are recorded."""
    from posgen.results.tables.metric_list import declared_specs
    from posgen.results.tables.tidy import unscorable_text

    for task in tasks:
        try:
            config = task_manager.task_config(task)
        except (KeyError, ValueError):
            continue
        specs = declared_specs(config)
        if specs and not any(s.rule is not None for s in specs):
            raise PlanError(
                f"--suite: posgen can score none of the metrics of {task!r} "
                f"({unscorable_text(specs)}); give the task a metric whose aggregation "
                "lm-eval registers (mean, bleu, ...) and its higher_is_better"
            )
