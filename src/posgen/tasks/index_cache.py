"""lm-eval's index of its own task folder, kept on disk between processes.

lm-eval's ``TaskManager`` parses every YAML file of its task folder each time one is built
(about 14,000 files in 0.4.13: some twenty seconds of CPU), so every ``lm_eval`` command
and every posgen command paid it before its first task. The index of that folder
(``TaskIndex.build``: each file parsed with its includes, ``!function`` left unresolved)
depends only on the folder's files. posgen's task manager keeps it in posgen's cache
(:func:`posgen.cache.cache_dir`, ``lm_eval_index/``), keyed on

- the lm-eval release, the Python release and the folder's path, and
- every file under the folder (``__pycache__`` aside): its path, size and modification
  time, so an edited, added or removed file (an include without the ``.yaml`` suffix too)
  indexes the folder again,

and reads it back in about a second. A folder with a file changed in the last two seconds
is indexed but not stored (the file system's clock may not have ticked since, so a second
change could keep the same key). Only lm-eval's own folder is kept: the folders of
``--include_path`` (the user's own YAML, edited between runs) are indexed as lm-eval
indexes them, every time, and merged over it as lm-eval merges them (a later folder's task
overrides, with lm-eval's warning). A cache that cannot be read is indexed again and
rewritten; one that cannot be written costs the next process the index, nothing else.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import logging
import os
import pickle
import sys
import time
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from posgen.atomic import atomic_write_bytes
from posgen.cache import cache_dir

log = logging.getLogger("posgen")
FORMAT = 1  # of the stored file; a change makes every earlier one unread
_lm_eval_log = logging.getLogger("lm_eval.tasks._index")


RECENT_NS = 2_000_000_000  # a file changed this recently keeps its folder's index unstored


def fingerprint(root: Path) -> tuple[str, int]:
    """The key of ``root``'s index (the releases, the folder and every file's path, size
    and modification time) and the newest modification time, in ns."""
    h, newest = hashlib.sha256(), 0
    release = importlib.metadata.version("lm_eval")
    h.update(f"{FORMAT}|{release}|{sys.version_info[:2]}|{root.resolve()}".encode())
    top = len(str(root)) + 1
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for name in sorted(files):
            path = os.path.join(folder, name)
            st = os.stat(path)
            newest = max(newest, st.st_mtime_ns)
            h.update(f"\0{path[top:]}\0{st.st_size}\0{st.st_mtime_ns}".encode())
    return h.hexdigest()[:24], newest


def stored_path(key: str) -> Path:
    return cache_dir() / "lm_eval_index" / f"{key}.pickle"


def cached_index(root: Path, build) -> dict[str, Any]:
    """``build([root])`` (lm-eval's ``TaskIndex.build``), read from the cache when a
    current one is there, else built and stored."""
    key, newest = fingerprint(root)
    path = stored_path(key)
    try:
        with open(path, "rb") as f:
            return pickle.load(f)
    except FileNotFoundError:
        pass
    except Exception as e:  # a truncated or foreign file: index again, and overwrite it
        log.debug("lm-eval task index %s unreadable (%s): indexing again", path, e)
    index = build([root])
    if time.time_ns() - newest < RECENT_NS:
        return index
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_bytes(path, pickle.dumps(index, protocol=pickle.HIGHEST_PROTOCOL))
    except OSError as e:
        log.debug("lm-eval task index not stored at %s (%s)", path, e)
    return index


def cached_task_index(original: type) -> type:
    """lm-eval's ``TaskIndex`` whose ``build`` takes lm-eval's own folder from the cache
    (the folder ``TaskManager`` puts first, ``default_root``) and indexes the rest as
    lm-eval does, merged over it as lm-eval merges paths."""

    class CachedTaskIndex(original):  # type: ignore[misc,valid-type]
        default_root: Path = Path(sys.modules[original.__module__].__file__).parent

        @staticmethod
        def build(paths: Iterable[Path], *, resolve_includes: bool = True) -> dict[str, Any]:
            paths = [Path(p) for p in paths]
            root = CachedTaskIndex.default_root
            if not paths or not resolve_includes or paths[0].resolve() != root.resolve():
                return original.build(paths, resolve_includes=resolve_includes)
            index = dict(cached_index(root, original.build))
            rest = original.build(paths[1:]) if paths[1:] else {}
            for name, entry in rest.items():
                if name in index:  # lm-eval's own words for a later path's override
                    _lm_eval_log.warning(
                        "Task '%s' from %s overrides existing task from %s",
                        name,
                        entry.yaml_path,
                        index[name].yaml_path,
                    )
                index[name] = entry
            return index

    return CachedTaskIndex
