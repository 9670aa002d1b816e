"""Fixtures for the task tests: one posgen TaskManager per session (indexing lm-eval's
~15k task YAML files takes seconds), and small local JSON docs shaped like the hub
datasets of HellaSwag and ARC, which tests load in place of the unreachable hub."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from hub_fixtures import ARC_DOCS, HELLASWAG_DOCS


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="session")
def posgen_tm():
    """A PosgenTaskManager (includes the offline suite and resolves perturbed names)."""
    from posgen.tasks.lm_eval_tasks import task_manager

    return task_manager()


@pytest.fixture(scope="session")
def local_data(tmp_path_factory) -> dict[str, dict[str, Any]]:
    """lm-eval config overrides that load HellaSwag- and ARC-shaped docs from local JSON."""
    root = tmp_path_factory.mktemp("hub-fixtures")
    hs = write_jsonl(root / "hellaswag.jsonl", HELLASWAG_DOCS)
    arc = write_jsonl(root / "arc.jsonl", ARC_DOCS)
    return {
        "hellaswag": {
            "dataset_path": "json",
            "dataset_name": None,
            "dataset_kwargs": {"data_files": {"train": hs, "validation": hs}},
        },
        "arc_easy": {
            "dataset_path": "json",
            "dataset_name": None,
            "dataset_kwargs": {"data_files": {"train": arc, "validation": arc, "test": arc}},
        },
    }
