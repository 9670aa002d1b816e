"""The metrics of a run's tasks, read from their configs before any model loads: a task
none of whose metrics posgen can score is refused (``posgen run`` exits 2 naming them and
why), instead of failing its first cell after the model loaded."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from posgen.harness.run import resolve  # looked up at call time (tests replace its manager)
from posgen.harness.run.options import PlanError
from posgen.results.folder.config import RunConfig
from posgen.results.tables.metric_list import declared_specs
from posgen.results.tables.tidy import unscorable_text


def check_run_metrics(config: RunConfig) -> list[str]:
    """:func:`check_task_metrics` for the tasks of a run given by name (the offline
    suite's are posgen's own), through the task manager the run will use (built here,
    once per process, with the run's ``--include-path`` folders). Returns a note when
    ``--gen-kwargs`` was given and no task generates (lm-eval ignores it then)."""
    if config.suite != "offline":
        manager = resolve.shared_task_manager(config.include_path)
        check_task_metrics(config.tasks, manager)
        types = {_output_type(t, manager) for t in config.tasks}
    else:  # posgen's own tasks
        from posgen.tasks.family import BASE_TASKS

        types = {BASE_TASKS[t]["output_type"] for t in config.tasks}
    if config.gen_kwargs is not None and None not in types and "generate_until" not in types:
        return [
            "--gen-kwargs: no task of the run generates (output_type generate_until); "
            "lm-eval ignores generation arguments for the others"
        ]
    return []


def _output_type(task: str, task_manager: Any) -> str | None:
    """A single task's ``output_type`` (None for a group or tag: its tasks vary)."""
    try:
        return task_manager.task_config(task).get("output_type", "generate_until")
    except (KeyError, ValueError):
        return None


def check_task_metrics(tasks: Iterable[str], task_manager: Any) -> None:
    """Refuse a task whose declared metrics (its ``metric_list`` under each filter, or
    lm-eval's defaults for its output type) posgen cannot score. A group or tag is not
    one task's config: its tasks are checked when their cells are recorded."""

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
