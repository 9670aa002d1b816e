"""The shipped task family: YAML up to date, installed, and found by plain lm-eval."""

from __future__ import annotations

from pathlib import Path

import pytest

from posgen.tasks import depth_suite, family, offline

ROOT = Path(__file__).resolve().parents[2]


def test_shipped_yaml_is_generated_from_the_family() -> None:
    present = {p.name: p.read_text(encoding="utf-8") for p in family.YAML_DIR.glob("*.yaml")}
    assert present == family.yaml_files(), "run: python -m posgen.tasks.family --write"


def test_the_wheel_writes_nothing_into_lm_eval() -> None:
    """An editable lm-eval would be shadowed by a stray ``lm_eval`` folder in site-packages."""
    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    build = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["hatch"]["build"]
    force = build["targets"]["wheel"].get("force-include", {})
    assert force == {"src/posgen/_lm_eval_hook.pth": "posgen_lm_eval_hook.pth"}


@pytest.fixture(scope="module")
def plain_tm():
    """lm-eval's own TaskManager given the family's folder: lm_eval without posgen's hook."""
    from posgen.tasks.lm_eval_tasks import _original_task_manager

    return _original_task_manager(include_path=str(family.YAML_DIR))


def test_plain_lm_eval_lists_every_shipped_task(plain_tm) -> None:
    """A YAML file that fails to parse silently disappears from lm-eval: check each."""
    names = family.shipped_names()
    assert set(names["tasks"]) <= set(plain_tm.all_subtasks)
    assert set(names["groups"]) <= set(plain_tm.all_groups)
    # 16 word-order groups, 5 depth groups and posgen_depth; each word-order scheme's
    # tasks and the offline tasks, each depth's tasks and the depth tasks
    depth_tasks = len(depth_suite.TASKS)
    assert len(names["groups"]) == 16 + 5 + 1
    assert len(names["tasks"]) == 17 * len(offline.TASKS) + 6 * depth_tasks
    assert "perm_swap_5pct_posgen_recall" in names["tasks"]  # outside the groups


def test_plain_lm_eval_builds_a_shipped_group(plain_tm) -> None:
    loaded = plain_tm.load(["perm_swap_10pct"])
    assert loaded["group_map"] == {
        "perm_swap_10pct": family.group_members(family.shipped_perturbations()[4])
    }
    for base in offline.SUITE_TASKS:
        task = loaded["tasks"][f"perm_swap_10pct_{base}"]
        assert task.config.metadata["posgen"]["spec"]["params"] == {"rate": 0.1}
        assert task.eval_docs[0]["posgen_doc_id"] == task.eval_docs[0]["doc_id"]
