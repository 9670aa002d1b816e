"""The names lm-eval's task manager knows, kept on disk so that checking ``--suite``
takes milliseconds instead of the half-minute lm-eval spends indexing every task YAML.

The index is keyed by the posgen and lm-eval releases, by the modification time of
lm-eval's task folder and by the names of posgen's shipped task files, so an upgrade, an
edited editable install or a task added to posgen rebuilds it; a name missing from a
current index is unknown to lm-eval too.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
from collections.abc import Callable, Collection
from pathlib import Path

from posgen import __version__
from posgen.atomic import atomic_write_text
from posgen.harness.embedded import cache_dir

# posgen's shipped task YAML (posgen.tasks.family.YAML_DIR, not imported: it loads lm-eval)
POSGEN_YAML = Path(__file__).resolve().parents[2] / "tasks" / "lm_eval_yaml"


def index_key() -> str:
    spec = importlib.util.find_spec("lm_eval")
    tasks = Path(next(iter(spec.submodule_search_locations))) / "tasks" if spec else Path()
    stamp = tasks.stat().st_mtime_ns if tasks.exists() else 0
    shipped = ",".join(sorted(p.name for p in POSGEN_YAML.glob("*.yaml")))
    text = f"{__version__}|{importlib.metadata.version('lm_eval')}|{tasks}|{stamp}|{shipped}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def known_task_names(build: Callable[[], Collection[str]]) -> frozenset[str]:
    """Every task, group and tag name; ``build()`` (the task manager's ``all_tasks``) runs
    only when no current index is on disk."""
    path = cache_dir() / f"lm_eval_tasks-{index_key()}.json"
    try:
        return frozenset(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):
        pass
    names = sorted(build())
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(names))
    except OSError:
        pass  # a read-only cache costs the next run the rebuild, nothing else
    return frozenset(names)
