"""Where an lm-eval task sits: its tags, the groups that list it, the configs it includes.

A task's *parents* in one lm-eval task index are

- its tags (``tag: mmlu_stem_tasks``, inherited through ``include``);
- every group whose ``task:`` list names it or one of its tags (a member of an inline
  group ``{group: stem, task: [...]}`` counts as a member of the named group around it);
- the task named by each YAML it ``include``s (a user's ``mytask.yaml`` with
  ``include: .../gsm8k/gsm8k.yaml`` has parent ``gsm8k``; a template file without a
  task name passes its own includes on).

:meth:`TaskAncestry.ancestors` walks parents breadth first: nearest first, names at the
same distance in sorted order. ``mmlu_anatomy`` -> ``mmlu_stem_tasks`` (tag) ->
``mmlu_stem`` (group) -> ``mmlu`` (group).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import yaml

from posgen.compat import internal


class TaskAncestry:
    """Parents, ancestors and member tasks of the names in one lm-eval task index
    (``{name: Entry}``, as ``TaskManager.task_index``)."""

    def __init__(self, index: Mapping[str, Any]) -> None:
        self._index = index
        self._groups_of: dict[str, set[str]] | None = None

    def _group_map(self) -> dict[str, set[str]]:
        """name -> the groups that list it (built once, on first use)."""
        if self._groups_of is None:
            found: dict[str, set[str]] = {}
            for name, entry in list(self._index.items()):
                if entry.kind.name == "GROUP" and entry.cfg:
                    for member in _members(entry.cfg.get("task")):
                        found.setdefault(member, set()).add(name)
            self._groups_of = found
        return self._groups_of

    def parents(self, name: str) -> set[str]:
        """Tags, listing groups and included tasks of ``name`` (module doc)."""
        entry = self._index.get(name)
        found = set(self._group_map().get(name, ()))
        if entry is not None and entry.kind.name in ("TASK", "PY_TASK"):
            found |= set(entry.tags or ())
            if entry.yaml_path is not None:
                found |= set(included_tasks(Path(entry.yaml_path)))
        found.discard(name)
        return found

    def ancestors(self, name: str) -> list[str]:
        """Every ancestor of ``name``, nearest first (breadth first, sorted per level)."""
        seen, level, out = {name}, [name], []
        while level:
            nxt = sorted({p for n in level for p in self.parents(n)} - seen)
            seen.update(nxt)
            out.extend(nxt)
            level = nxt
        return out

    def tasks_under(self, name: str) -> set[str]:
        """The single tasks a task, tag or group name stands for."""
        out: set[str] = set()
        stack, seen = [name], set()
        while stack:
            current = stack.pop()
            if current in seen:
                continue
            seen.add(current)
            entry = self._index.get(current)
            if entry is None:
                continue
            kind = entry.kind.name
            if kind in ("TASK", "PY_TASK"):
                out.add(current)
            elif kind == "TAG":
                stack.extend(entry.tags)
            elif kind == "GROUP" and entry.cfg:
                stack.extend(_members(entry.cfg.get("task")))
        return out


def _members(task_field: Any) -> Iterable[str]:
    """Names in a group's ``task:`` field, inline groups flattened."""
    items = task_field if isinstance(task_field, list) else [task_field]
    for item in items:
        if isinstance(item, str):
            yield item
        elif isinstance(item, dict) and "group" in item and "task" in item:
            yield from _members(item["task"])
        elif isinstance(item, dict) and isinstance(item.get("task"), str):
            yield item["task"]


def included_tasks(path: Path, _seen: set[Path] | None = None) -> list[str]:
    """Task names of the YAML files ``path`` includes (through nameless templates)."""
    load_yaml = internal("lm_eval.tasks._yaml_loader:load_yaml")
    seen = _seen if _seen is not None else {path.resolve()}
    try:
        raw = load_yaml(path, resolve_func=False, recursive=False)
    except (OSError, ValueError, yaml.YAMLError):
        return []
    includes = raw.get("include") or []
    names = []
    for inc in includes if isinstance(includes, list) else [includes]:
        inc_path = (path.parent / inc).resolve()
        if inc_path in seen or not inc_path.is_file():
            continue
        seen.add(inc_path)
        try:
            name = load_yaml(inc_path, resolve_func=False, recursive=False).get("task")
        except (OSError, ValueError, yaml.YAMLError):
            continue
        names.extend([name] if isinstance(name, str) else included_tasks(inc_path, seen))
    return names
