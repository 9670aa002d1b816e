"""posgen's tasks in lm-eval: the shipped family and perturbed names of any task.

Two routes, both tested:

- The shipped family (:mod:`posgen.tasks.family`): :class:`PosgenTaskManager` knows it by
  name; lm-eval's own ``TaskManager`` finds its YAML with ``include_path=family.YAML_DIR``.
- :class:`PosgenTaskManager` also resolves *any* name of the grammar in
  :mod:`posgen.tasks.naming` on demand (another rate or seed, or any lm-eval task,
  group or tag as the base): ``perm_swap_0p5pct_hellaswag``, ``perm_adjacent_5pct_seed7_arc_easy``.
  :func:`register` makes it lm-eval's ``TaskManager`` for the process (the ``lm_eval``
  CLI calls it through posgen's ``.pth`` start-up hook); :func:`task_manager` returns one
  for ``lm_eval.simple_evaluate(..., task_manager=...)``.

Which doc fields of a base task move: :meth:`PosgenTaskManager.content_fields`
(:mod:`posgen.tasks.content_fields`): the user's choice in the TaskManager metadata
(``lm_eval --metadata '{"posgen_fields": {"mytask": ["question"]}}'``), else posgen's
table by the task's nearest ancestor, else the one field its ``doc_to_text`` reads.
A perturbed task's config metadata records the choice under ``posgen_content_fields``;
an inferred choice is also logged (logger ``posgen``, level WARNING).
"""

# ruff: noqa: E402  (lm-eval's release is checked before its private modules load)
from __future__ import annotations

import bisect
import importlib
import logging
from collections.abc import Callable
from pathlib import Path
from typing import Any

from posgen.compat import require_supported_lm_eval

require_supported_lm_eval()  # before lm-eval's private modules below are imported

from lm_eval.tasks import TaskManager

from posgen.compat import (
    TASK_MANAGER_HOMES,
    install_task_manager,
    internal,
    patched,
    replace_task_manager,
)
from posgen.perturbations import PerturbationError, parse
from posgen.perturbations.text import TextPerturbation
from posgen.tasks import depth_lm_eval, family, naming
from posgen.tasks.content_fields import FieldChoice, choose_fields, fields_from_metadata
from posgen.tasks.index_cache import cached_task_index
from posgen.tasks.perturbed_task import POSGEN_KEY, TaskPerturbation, perturbed_class
from posgen.tasks.task_ancestry import TaskAncestry

Entry = internal("lm_eval.tasks._index:Entry")
Kind = internal("lm_eval.tasks._index:Kind")
load_yaml = internal("lm_eval.tasks._yaml_loader:load_yaml")
_GROUP_KEYS = set(internal("lm_eval.config.group:GroupConfig").__dataclass_fields__)
_original_task_manager = TaskManager
CONTENT_FIELDS_KEY = "posgen_content_fields"
log = logging.getLogger("posgen")


def perturbed_task_name(scheme: str, rate: float, base_task: str, seed: int | None = None) -> str:
    """``perturbed_task_name("swap", 0.05, "hellaswag") == "perm_swap_5pct_hellaswag"``.

    For schemes with a rate (swap, adjacent). ``base_task="posgen"`` or ``""`` gives the
    group over the offline suite (``perm_swap_5pct``). See :func:`task_name_for` for the
    others.
    """
    p = parse("text", f"{scheme}:{float(rate)!r}")
    return task_name_for(p, base_task, seed)  # type: ignore[arg-type]


def task_name_for(p: TextPerturbation, base_task: str | None, seed: int | None = None) -> str:
    """The task name of any text perturbation (``perm_shuffle_all_piqa``, ``perm_local_shuffle_w3_...``)."""
    base = None if base_task in (None, "", "posgen") else base_task
    return naming.format_name(p, base, naming.DEFAULT_SEED if seed is None else seed)


class PosgenTaskManager(_original_task_manager):  # type: ignore[misc,valid-type]
    """A ``TaskManager`` that also resolves perturbed task names (see the module doc)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        # lm-eval's own task folder indexed once, then read from posgen's cache
        with patched("lm_eval.tasks.manager:TaskIndex", cached_task_index):
            super().__init__(*args, **kwargs)
        # tasks that declare the evidence-depth protocol are built with its class
        self._factory = depth_lm_eval.DepthTaskFactory(meta=self.metadata)
        self._ancestry = TaskAncestry(self._index)
        for name, cfg in family.BASE_TASKS.items():
            if name not in self._index:  # the suite works even without its YAML installed
                self._add(
                    Entry(name=name, kind=Kind.TASK, yaml_path=None, cfg=family.resolved(cfg))
                )
        if family.DEPTH_GROUP["group"] not in self._index:
            group = family.DEPTH_GROUP
            self._add(Entry(name=group["group"], kind=Kind.GROUP, yaml_path=None, cfg=group))
        shipped = family.shipped_names()  # the family works even without its YAML installed
        for name in shipped["groups"] + shipped["tasks"]:  # tasks outside the groups too
            self._resolve(name)

    def _entry(self, name: str) -> Entry | None:
        return super()._entry(name) or self._resolve(name)

    def match_tasks(self, task_list: list[str]) -> list[str]:
        """The names lm-eval's CLI asks for, with posgen's resolved; the documents of an
        evidence-depth task among them checked (built once; the ``lm_eval`` command
        matches names before it loads the model, so a bad document stops it first)."""
        matched = set(super().match_tasks(task_list))
        for name in task_list:
            if not any(c in name for c in "*?[") and name not in matched and self._resolve(name):
                matched.add(name)
        self.check_depth_documents([n for n in task_list if n in matched])
        return sorted(matched)

    def check_depth_documents(self, names: list[str]) -> None:
        """Build every evidence-depth task among ``names`` (a moved task or group, a task
        declaring the protocol), which checks each of its documents: a
        :class:`~posgen.tasks.depth_protocol.DepthTaskError` names the first bad one."""
        for name in names:
            if depth_lm_eval.is_depth_task(name, self._index.get(name)):
                self.load([name])

    def task_config(self, name: str, overrides: dict[str, Any] | None = None) -> dict[str, Any]:
        """The full config of one task (base or perturbed) with ``overrides`` applied,
        e.g. local ``dataset_kwargs`` in place of the hub; ``load([cfg])`` builds it."""
        entry = self._entry(name)
        if entry is None or entry.kind not in (Kind.TASK, Kind.PY_TASK):
            raise KeyError(f"{name!r} is not a single lm-eval task")
        return {**self._factory._load_full_config(entry, None), **(overrides or {})}

    # ------------------------------------------------------------------ resolution
    def _add(self, entry: Entry) -> Entry:
        self._index[entry.name] = entry
        bucket = {Kind.GROUP: self._all_groups, Kind.TAG: self._all_tags}.get(
            entry.kind, self._all_subtasks
        )
        for names in (self._all_tasks, bucket):  # sorted lists of some 14,000 names
            at = bisect.bisect_left(names, entry.name)
            if at == len(names) or names[at] != entry.name:
                names.insert(at, entry.name)
        return entry

    def _resolve(self, name: str) -> Entry | None:
        """The entry of a perturbed name, created on first use; None if not that form."""
        if name in self._index:
            return self._index[name]
        if name.endswith(".yaml"):  # a config file path, not a name
            return None
        variant = depth_lm_eval.variant_config(self._factory, name, super()._entry)
        if variant is not None:  # a built-in depth task at another length
            return self._add(Entry(name=name, kind=Kind.PY_TASK, yaml_path=None, cfg=variant))
        try:
            parsed = naming.parse_name(name)
        except PerturbationError as exc:
            raise naming.TaskNameError(
                f"{name!r}: {exc}. Names: perm_<scheme>_<level>[_seed<S>]_<task>, "
                "e.g. perm_swap_5pct_hellaswag"
            ) from None
        if parsed is None:
            return None
        if parsed.base_task is None:
            members = family.group_members(parsed.perturbation, parsed.seed)
            return self._group(
                name,
                members,
                {"posgen_spec": parsed.perturbation.spec.to_dict(), "posgen_seed": parsed.seed},
            )
        base = super()._entry(parsed.base_task)
        if base is None and depth_lm_eval.depth_suite.parse_variant(parsed.base_task):
            base = self._resolve(parsed.base_task)  # a built-in depth task's length variant
        if base is None:
            raise naming.TaskNameError(
                f"{name!r}: base task {parsed.base_task!r} is not an lm-eval task, "
                "group or tag (see `lm-eval ls tasks`)"
            )
        if naming.parse_name(parsed.base_task) is not None:
            raise naming.TaskNameError(f"{name!r}: a perturbed task cannot be perturbed again")
        return self._perturb_entry(name, parsed, base)

    def _perturb_entry(self, name: str, parsed: naming.PerturbedName, base: Entry) -> Entry:
        def child(t):
            return naming.format_name(parsed.perturbation, t, parsed.seed)

        if base.kind == Kind.TAG:
            members = sorted(base.tags)
            for m in members:
                self._resolve(child(m))
            return self._add(
                Entry(name=name, kind=Kind.TAG, yaml_path=None, tags={child(m) for m in members})
            )
        if base.kind == Kind.GROUP:
            raw = load_yaml(base.yaml_path, resolve_func=True) if base.yaml_path else dict(base.cfg)
            try:
                members = self._perturbed_members(raw.get("task") or [], child)
            except TypeError:
                raise ValueError(
                    f"{name!r}: group {base.name!r} defines tasks inline; perturb "
                    "its tasks one by one instead"
                ) from None
            extra = {k: v for k, v in raw.items() if k in _GROUP_KEYS - {"group", "task"}}
            return self._group(name, members, {}, extra)
        if parsed.perturbation.moves == "passages":  # the evidence moved: its own config
            cfg = depth_lm_eval.moved_config(
                self._factory, name, parsed.perturbation, parsed.seed, parsed.base_task, base
            )
        else:
            cfg = self.perturbed_config(name, parsed, base)
        return self._add(Entry(name=name, kind=Kind.PY_TASK, yaml_path=None, cfg=cfg))

    def _perturbed_members(self, members: Any, child: Any) -> list[Any]:
        """A group's ``task:`` list with every named member perturbed; an inline group
        (``{group: stem, task: [...]}``) keeps its keys around its perturbed members.
        TypeError for a task defined inline (it has no base name to perturb)."""
        out: list[Any] = []
        for m in members if isinstance(members, list) else [members]:
            if isinstance(m, str):
                out.append(child(m))
            elif isinstance(m, dict) and m.get("group") in self._index:  # a known group
                out.append({**m, "group": child(m["group"])})
            elif isinstance(m, dict) and "group" in m:  # an inline group
                out.append({**m, "task": self._perturbed_members(m.get("task") or [], child)})
            elif isinstance(m, dict) and m.get("task") in self._index:  # a task, overridden
                out.append({**m, "task": child(m["task"])})
            else:
                raise TypeError(m)
        return out

    def _member_names(self, members: list[Any]) -> list[str]:
        """The names in a perturbed ``task:`` list (as :meth:`_perturbed_members` makes)."""
        names: list[str] = []
        for m in members:
            if isinstance(m, str):
                names.append(m)
            elif "group" in m and "task" in m and not isinstance(m["task"], str):
                names.extend(self._member_names(m["task"]))
            else:
                names.append(m["group"] if "group" in m else m["task"])
        return names

    def _group(
        self,
        name: str,
        members: list[Any],
        meta: dict[str, Any],
        extra: dict[str, Any] | None = None,
    ) -> Entry:
        for m in self._member_names(members):
            self._resolve(m)
        cfg = {
            **(extra or {}),
            "group": name,
            "task": members,
            "metadata": {**(extra or {}).get("metadata", {}), **meta},
        }
        return self._add(Entry(name=name, kind=Kind.GROUP, yaml_path=None, cfg=cfg))

    def perturbed_config(
        self, name: str, parsed: naming.PerturbedName, base: Entry
    ) -> dict[str, Any]:
        """The full lm-eval config of a perturbed task: the base config, renamed, with
        the perturbation under ``posgen_perturbation`` and the perturbing class."""
        cfg = dict(self._factory._load_full_config(base, None))
        for key in ("tag", "group", "task_list", "task_alias"):
            cfg.pop(key, None)
        choice = self._choose(parsed.base_task or "", cfg)
        if choice.how == "inferred" and choice.describe() not in _NOTED:
            _NOTED.add(choice.describe())  # once per task and process, not once per rate
            log.warning("%s", choice.describe())  # the posgen CLI prefixes "posgen: "
        tp = TaskPerturbation(
            parsed.perturbation, parsed.seed, parsed.base_task or "", choice.fields
        )
        cfg.update(
            {
                "task": name,
                "class": perturbed_class(cfg.pop("class", None)),
                POSGEN_KEY: tp.to_dict(),
            }
        )
        cfg["metadata"] = {
            **{k: v for k, v in cfg.get("metadata", {}).items() if k != "config_source"},
            CONTENT_FIELDS_KEY: choice.to_dict(),
        }
        return cfg

    def content_fields(
        self, task: str, fields: list[str] | None = None, given_by: str = "--fields"
    ) -> FieldChoice:
        """The content fields of lm-eval task ``task`` and how they were decided:
        ``fields`` if given (named by ``given_by``), else the TaskManager metadata's
        ``posgen_fields``, posgen's table by the task's nearest ancestor, or the one field
        its ``doc_to_text`` reads. Reads the task's indexed config (its functions
        unresolved: nothing of the task is imported). Raises
        :class:`~posgen.tasks.content_fields.UnknownContentFields` when none decides."""
        entry = self._entry(task)
        if entry is None or entry.kind not in (Kind.TASK, Kind.PY_TASK):
            raise KeyError(f"{task!r} is not a single lm-eval task")
        config = entry.cfg if entry.cfg else self.task_config(task)
        return self._choose(task, config, fields, given_by)

    def _choose(
        self,
        task: str,
        config: dict[str, Any],
        fields: list[str] | None = None,
        given_by: str = "--fields",
    ) -> FieldChoice:
        if not fields:
            fields, given_by = fields_from_metadata(self.metadata, task), "--metadata posgen_fields"
        return choose_fields(
            task,
            config,
            override=fields,
            override_from=given_by,
            ancestors=self._ancestry.ancestors(task),
        )


def task_manager(
    include_path: str | Path | list[str | Path] | None = None,
    metadata: dict[str, Any] | None = None,
) -> TaskManager:
    """A ``TaskManager`` that knows the offline suite, the shipped family and every
    perturbed name (``simple_evaluate(..., task_manager=task_manager())``)."""
    return PosgenTaskManager(include_path=include_path, metadata=metadata)


_SHARED: dict[tuple[str, ...], TaskManager] = {}
_NOTED: set[str] = set()  # inferred content fields already noted in this process


def shared_task_manager(include_path: tuple[str, ...] = ()) -> TaskManager:
    """posgen's task manager with the folders ``include_path`` (the user's own task YAML),
    built once per process for each set of folders: indexing every task YAML of lm-eval
    takes seconds, and a run, its scores and its report read the same tasks."""
    key = tuple(str(p) for p in include_path)
    if key not in _SHARED:
        _SHARED[key] = task_manager(include_path=list(key) or None)
    return _SHARED[key]


# the undo of every place posgen's task manager was put in place, newest last
_RESTORE: list[Callable[[], None]] = []


def register() -> None:
    """Make :class:`PosgenTaskManager` the ``TaskManager`` that lm-eval constructs in
    this process (its CLI, ``lm-eval ls tasks``, ``simple_evaluate`` without a
    ``task_manager``). Idempotent; :func:`unregister` undoes it."""
    if not all(
        importlib.import_module(home).TaskManager is PosgenTaskManager
        for home in TASK_MANAGER_HOMES
    ):
        _RESTORE.append(install_task_manager(PosgenTaskManager))


def register_in(module: Any) -> None:
    """:func:`register` in one of lm-eval's ``TaskManager`` homes only, as it finishes
    loading (the ``lm_eval`` CLI's start-up hook); :func:`unregister` undoes it too."""
    _RESTORE.append(replace_task_manager(module, PosgenTaskManager))


def unregister() -> None:
    """lm-eval's own ``TaskManager`` again wherever :func:`register` or
    :func:`register_in` put posgen's (undone newest first)."""
    while _RESTORE:
        _RESTORE.pop()()
