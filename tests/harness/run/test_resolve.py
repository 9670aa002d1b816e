"""``posgen run --seeds K``: the plan and the config hash (unit tier: no model)."""

from __future__ import annotations

import argparse

from posgen.harness.cli.run import configure_parser
from posgen.harness.run.resolve import resolve_config
from posgen.results.folder.plan import plan_cells
from posgen.results.folder.schema import config_hash


def _config(*extra: str):
    parser = argparse.ArgumentParser()
    configure_parser(parser)
    return resolve_config(parser.parse_args(["--quick", "--suite", "posgen_prose", *extra]))


def test_one_seed_keeps_the_config_hash_of_runs_made_before_seeds_existed():
    one, explicit = _config().to_dict(), _config("--seeds", "1").to_dict()
    assert "seeds" not in one and config_hash(one) == config_hash(explicit)
    assert config_hash(_config("--seeds", "3").to_dict()) != config_hash(one)


def test_k_seeds_plan_k_cells_per_perturbation_and_one_baseline():
    one = [c.to_dict() for c in plan_cells(_config())]
    three = [c.to_dict() for c in plan_cells(_config("--seeds", "3"))]
    perturbed = [c for c in one if c["kind"] != "none"]
    assert len(three) == 1 + 3 * len(perturbed)
    ids = [c["cell_id"] for c in three]
    assert len(set(ids)) == len(ids)
    assert {c["cell_id"] for c in one} <= set(ids)  # the first seed keeps its cell ids
    text = [c for c in three if c["kind"] == "text" and c["rate"] == 0.05]
    assert sorted(c["seed"] for c in text) == [1234, 1235, 1236]
    assert len({c["lm_eval_task"] for c in text}) == 3  # each seed its own text draw


def test_posgen_s_own_tasks_pass_the_suite_check_before_the_task_index(tmp_path, monkeypatch):
    """Before lm-eval's task index exists, a name written in no lm-eval task file is
    refused without building it, except posgen's own tasks: every task the offline suite
    builds (also one outside the default suite) and the perturbed family."""
    from types import SimpleNamespace

    from posgen.harness.run import resolve

    own = ["posgen_recall", "perm_swap_5pct_posgen_recall"]
    monkeypatch.setenv("POSGEN_CACHE", str(tmp_path))
    monkeypatch.setattr(resolve, "shared_task_manager", lambda: SimpleNamespace(all_tasks=own))
    assert resolve.suite_tasks(",".join(own)) == (own, None)
