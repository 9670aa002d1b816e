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

Content fields of tasks posgen does not know are chosen with the TaskManager metadata
(``lm_eval --metadata '{"posgen_fields": {"mytask": ["question"]}}'``).
"""

# ruff: noqa: E402  (lm-eval's release is checked before its private modules load)
from __future__ import annotations

from pathlib import Path
from typing import Any

from posgen.compat import require_supported_lm_eval

require_supported_lm_eval()  # before lm-eval's private modules below are imported

from lm_eval.tasks import TaskManager

from posgen.compat import install_task_manager, internal
from posgen.perturbations import PerturbationError, parse
from posgen.perturbations.text import TextPerturbation
from posgen.tasks import family, naming
from posgen.tasks.content_fields import fields_from_metadata, resolve_fields
from posgen.tasks.perturbed_task import POSGEN_KEY, TaskPerturbation, perturbed_class

Entry = internal("lm_eval.tasks._index:Entry")
Kind = internal("lm_eval.tasks._index:Kind")
load_yaml = internal("lm_eval.tasks._yaml_loader:load_yaml")
_GROUP_KEYS = set(internal("lm_eval.config.group:GroupConfig").__dataclass_fields__)
_original_task_manager = TaskManager


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
        super().__init__(*args, **kwargs)
        for name, cfg in family.BASE_TASKS.items():
            if name not in self._index:  # the suite works even without its YAML installed
                self._add(
                    Entry(name=name, kind=Kind.TASK, yaml_path=None, cfg=family.resolved(cfg))
                )
        shipped = family.shipped_names()  # the family works even without its YAML installed
        for name in shipped["groups"] + shipped["tasks"]:  # tasks outside the groups too
            self._resolve(name)

    def _entry(self, name: str) -> Entry | None:
        return super()._entry(name) or self._resolve(name)

    def match_tasks(self, task_list: list[str]) -> list[str]:
        matched = set(super().match_tasks(task_list))
        for name in task_list:
            if not any(c in name for c in "*?[") and name not in matched and self._resolve(name):
                matched.add(name)
        return sorted(matched)

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
        for names in (self._all_tasks, bucket):
            if entry.name not in names:
                names.append(entry.name)
                names.sort()
        return entry

    def _resolve(self, name: str) -> Entry | None:
        """The entry of a perturbed name, created on first use; None if not that form."""
        if name in self._index:
            return self._index[name]
        if name.endswith(".yaml"):  # a config file path, not a name
            return None
        try:
            parsed = naming.parse_name(name)
        except PerturbationError as exc:
            raise ValueError(
                f"{name!r}: {exc}. Names: perm_<scheme>_<level>[_seed<S>]_<task>, "
                "e.g. perm_swap_5pct_hellaswag"
            ) from None
        if parsed is None:
            return None
        if parsed.base_task is None:
            members = [
                naming.format_name(parsed.perturbation, t, parsed.seed)
                for t in family.offline.SUITE_TASKS
            ]
            return self._group(
                name,
                members,
                {"posgen_spec": parsed.perturbation.spec.to_dict(), "posgen_seed": parsed.seed},
            )
        base = super()._entry(parsed.base_task)
        if base is None:
            raise ValueError(
                f"{name!r}: base task {parsed.base_task!r} is not an lm-eval task, "
                "group or tag (see `lm-eval ls tasks`)"
            )
        if naming.parse_name(parsed.base_task) is not None:
            raise ValueError(f"{name!r}: a perturbed task cannot be perturbed again")
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
            members = raw.get("task") or []
            if not all(isinstance(m, str) for m in members):
                raise ValueError(
                    f"{name!r}: group {base.name!r} defines inline tasks; perturb "
                    "its tasks one by one instead"
                )
            extra = {k: v for k, v in raw.items() if k in _GROUP_KEYS - {"group", "task"}}
            return self._group(name, [child(m) for m in members], {}, extra)
        cfg = self.perturbed_config(name, parsed, base)
        return self._add(Entry(name=name, kind=Kind.PY_TASK, yaml_path=None, cfg=cfg))

    def _group(
        self,
        name: str,
        members: list[str],
        meta: dict[str, Any],
        extra: dict[str, Any] | None = None,
    ) -> Entry:
        for m in members:
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
        override = fields_from_metadata(self.metadata, parsed.base_task or "")
        fields = resolve_fields(parsed.base_task or "", cfg, override)
        tp = TaskPerturbation(parsed.perturbation, parsed.seed, parsed.base_task or "", fields)
        cfg.update(
            {
                "task": name,
                "class": perturbed_class(cfg.pop("class", None)),
                POSGEN_KEY: tp.to_dict(),
            }
        )
        cfg["metadata"] = {k: v for k, v in cfg.get("metadata", {}).items() if k != "config_source"}
        return cfg


def task_manager(
    include_path: str | Path | list[str | Path] | None = None,
    metadata: dict[str, Any] | None = None,
) -> TaskManager:
    """A ``TaskManager`` that knows the offline suite, the shipped family and every
    perturbed name (``simple_evaluate(..., task_manager=task_manager())``)."""
    return PosgenTaskManager(include_path=include_path, metadata=metadata)


def register() -> None:
    """Make :class:`PosgenTaskManager` the ``TaskManager`` that lm-eval constructs in
    this process (its CLI, ``lm-eval ls tasks``, ``simple_evaluate`` without a
    ``task_manager``). Idempotent."""
    install_task_manager(PosgenTaskManager)
