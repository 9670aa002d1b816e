"""The names lm-eval's task manager knows, kept on disk so that checking ``--suite``
takes milliseconds instead of the half-minute lm-eval spends indexing every task YAML.

The index is keyed by the posgen and lm-eval releases, by the modification time of
lm-eval's task folder and by the names of posgen's shipped task files, so an upgrade, an
edited editable install or a task added to posgen rebuilds it; a name missing from a
current index is unknown to lm-eval too.

Before the index exists (right after an install or an upgrade), a name that is written
in no file of lm-eval's task folder is unknown without building it
(:func:`unwritten_names`): every name lm-eval indexes is the ``task``, ``group`` or
``tag`` of a YAML file there or of a file one includes. Reading the folder's files takes
about a second where the index takes tens.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import re
from collections.abc import Callable, Collection, Iterable
from pathlib import Path

from posgen import __version__
from posgen.atomic import atomic_write_text
from posgen.cache import cache_dir

# posgen's shipped task YAML (posgen.tasks.family.YAML_DIR, not imported: it loads lm-eval)
POSGEN_YAML = Path(__file__).resolve().parents[2] / "tasks" / "lm_eval_yaml"


def task_folder() -> Path:
    """lm-eval's built-in task folder (found without importing lm-eval)."""
    spec = importlib.util.find_spec("lm_eval")
    return Path(next(iter(spec.submodule_search_locations))) / "tasks" if spec else Path()


def index_key() -> str:
    tasks = task_folder()
    stamp = tasks.stat().st_mtime_ns if tasks.exists() else 0
    shipped = ",".join(sorted(p.name for p in POSGEN_YAML.glob("*.yaml")))
    text = f"{__version__}|{importlib.metadata.version('lm_eval')}|{tasks}|{stamp}|{shipped}"
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def _index_path() -> Path:
    return cache_dir() / f"lm_eval_tasks-{index_key()}.json"


def stored_task_names() -> frozenset[str] | None:
    """The current index on disk, or None when there is none (or it is unreadable)."""
    try:
        return frozenset(json.loads(_index_path().read_text(encoding="utf-8")))
    except (OSError, ValueError):
        return None


def known_task_names(build: Callable[[], Collection[str]]) -> frozenset[str]:
    """Every task, group and tag name; ``build()`` (the task manager's ``all_tasks``) runs
    only when no current index is on disk."""
    stored = stored_task_names()
    if stored is not None:
        return stored
    path = _index_path()
    names = sorted(build())
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(path, json.dumps(names))
    except OSError:
        pass  # a read-only cache costs the next run the rebuild, nothing else
    return frozenset(names)


_SKIP = {".pyc", ".jpg", ".jpeg", ".png", ".gif"}
_DECLARED = re.compile(rb"^\s*-?\s*(?:task|group|tag)\s*:\s*[\"']?([\w.+-]+)", re.M)


def unwritten_names(names: Iterable[str]) -> tuple[list[str], list[str]]:
    """The ``names`` written in no file of lm-eval's task folder (so unknown to its
    index), and the names that folder's files declare (``task:``, ``group:``, ``tag:``
    lines; for suggestions). Reads every file once, no YAML parsing."""
    folder = task_folder()
    files = [
        p
        for p in sorted(folder.rglob("*"))
        if p.suffix not in _SKIP and "__pycache__" not in p.parts and p.is_file()
    ]
    blob = b"\0".join(p.read_bytes() for p in files)
    absent = [n for n in names if n.encode("utf-8") not in blob]
    declared = sorted({m.decode("utf-8", "replace") for m in _DECLARED.findall(blob)})
    return absent, declared
