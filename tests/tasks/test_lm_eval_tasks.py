"""posgen's task manager put in lm-eval's place, and taken out again."""

from __future__ import annotations

import importlib
import types

import pytest

from posgen.compat import TASK_MANAGER_HOMES
from posgen.tasks import lm_eval_tasks
from posgen.tasks.lm_eval_tasks import PosgenTaskManager, _original_task_manager


@pytest.fixture
def plain_homes(monkeypatch) -> list:
    """lm-eval's homes of ``TaskManager`` holding its own class, nothing to undo yet;
    put back as they were after the test."""
    homes = [importlib.import_module(h) for h in TASK_MANAGER_HOMES]
    for home in homes:
        monkeypatch.setattr(home, "TaskManager", _original_task_manager)
    monkeypatch.setattr(lm_eval_tasks, "_RESTORE", [])
    return homes


def test_register_twice_then_unregister_puts_lm_evals_own_back(plain_homes):
    lm_eval_tasks.register()
    lm_eval_tasks.register()  # idempotent: nothing more to undo
    assert all(home.TaskManager is PosgenTaskManager for home in plain_homes)
    assert len(lm_eval_tasks._RESTORE) == 1
    lm_eval_tasks.unregister()
    assert all(home.TaskManager is _original_task_manager for home in plain_homes)
    assert lm_eval_tasks._RESTORE == []


def test_unregister_undoes_the_start_up_hooks_per_module_replacement(plain_homes):
    loaded = types.SimpleNamespace(TaskManager=_original_task_manager)
    lm_eval_tasks.register_in(loaded)  # as the hook does when a home finishes loading
    lm_eval_tasks.register()  # and then posgen itself
    assert loaded.TaskManager is PosgenTaskManager
    lm_eval_tasks.unregister()
    assert loaded.TaskManager is _original_task_manager
    assert all(home.TaskManager is _original_task_manager for home in plain_homes)
