"""A task none of whose metrics posgen can score is refused before any model loads
(unit tier: task configs as lm-eval's task manager gives them)."""

from __future__ import annotations

import pytest

from posgen.harness.run.metric_check import check_task_metrics
from posgen.harness.run.options import PlanError


class Configs:
    """A task manager's ``task_config``: configs by name, a group raises KeyError."""

    def __init__(self, **configs):
        self.configs = configs

    def task_config(self, name):
        if name not in self.configs:
            raise KeyError(f"{name!r} is not a single lm-eval task")
        return self.configs[name]


def _agg_fn(items):
    return 0.0


BYPASS = {"metric": "bypass", "aggregation": "bypass", "higher_is_better": True}
TASKS = Configs(
    gen={"output_type": "generate_until", "metric_list": [BYPASS, {"metric": "exact_match"}]},
    rolling={"output_type": "loglikelihood_rolling"},
    unscored={"output_type": "generate_until", "metric_list": [BYPASS]},
    custom={"metric_list": [{"metric": "x", "aggregation": _agg_fn, "higher_is_better": True}]},
)


def test_a_task_with_one_scorable_metric_or_lm_evals_defaults_passes():
    # a task's own aggregation function counts: it is loaded from the task's config
    check_task_metrics(["gen", "rolling", "custom", "some_group"], TASKS)


def test_a_task_posgen_can_score_nothing_of_is_refused_naming_why():
    with pytest.raises(PlanError, match="none of the metrics of 'unscored'") as e:
        check_task_metrics(["gen", "unscored"], TASKS)
    assert "bypass: lm-eval's bypass aggregation" in str(e.value)


@pytest.mark.parametrize(
    ("suite", "noted"),
    [("offline", True), ("rolling", True), ("gen,rolling", False), ("some_group", False)],
)
def test_gen_kwargs_for_tasks_that_do_not_generate_get_a_note(monkeypatch, suite, noted):
    from posgen.harness.run import resolve
    from posgen.harness.run.metric_check import check_run_metrics
    from posgen.results.folder.config import RunConfig
    from synthetic_run import config

    monkeypatch.setattr(resolve, "shared_task_manager", lambda include_path=(): TASKS)
    tasks = ["posgen_prose", "posgen_cloze"] if suite == "offline" else suite.split(",")
    run = RunConfig.from_dict(config({"m": {}}, suite=suite, tasks=tasks, gen_kwargs={"x": 1}))
    notes = check_run_metrics(run)
    assert bool(notes) is noted
    assert all("no task of the run generates" in n for n in notes)
    assert check_run_metrics(RunConfig.from_dict(config({"m": {}}, suite=suite, tasks=tasks))) == []
