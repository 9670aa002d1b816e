"""How posgen's task manager builds evidence-depth tasks (used by
:mod:`posgen.tasks.lm_eval_tasks`).

- :class:`DepthTaskFactory`: lm-eval's task factory, except that a task whose config
  declares the field protocol (``metadata.posgen_depth``) is built with the protocol's
  class (:func:`posgen.tasks.depth_task.with_protocol_class`): its documents are checked
  and given the canonical fields wherever it is built (alone, in a group, perturbed).
- :func:`moved_config`: the config of ``perm_depth_<D>pct_<task>``; a task without the
  protocol is refused in one line that says what to add to its YAML.
- :func:`variant_config`: a built-in depth task at another number of passages,
  ``<task>_n<N>`` (:mod:`posgen.tasks.depth_suite`).
"""

# ruff: noqa: E402  (lm-eval's release is checked before its private modules load)
from __future__ import annotations

from typing import Any

from posgen.compat import internal, require_supported_lm_eval

require_supported_lm_eval()

from posgen.perturbations import PerturbationError
from posgen.perturbations.depth import EvidenceDepth
from posgen.tasks import depth_protocol, depth_suite, naming
from posgen.tasks.depth_task import DEPTH_KEY, DepthTaskPerturbation, depth_class
from posgen.tasks.depth_task import with_protocol_class as _with_protocol_class

TaskFactory = internal("lm_eval.tasks._factory:TaskFactory")


class DepthTaskFactory(TaskFactory):  # type: ignore[misc,valid-type]
    """lm-eval's ``TaskFactory`` that builds a task declaring the depth protocol with
    the protocol's class (a malformed declaration is refused in one line)."""

    def _load_full_config(
        self, entry: Any, overrides: dict[str, Any] | None = None
    ) -> dict[str, Any]:
        return _with_protocol_class(super()._load_full_config(entry, overrides))


def moved_config(
    factory: Any, name: str, p: EvidenceDepth, seed: int, base_task: str, base: Any
) -> dict[str, Any]:
    """The full lm-eval config of ``name``: task ``base_task`` (its index entry ``base``)
    with each document's evidence moved to depth ``p.depth``."""
    cfg = dict(factory._load_full_config(base, None))
    for key in ("tag", "group", "task_list", "task_alias"):
        cfg.pop(key, None)
    if depth_protocol.declared_fields(base_task, cfg.get("metadata")) is None:
        raise depth_protocol.missing_protocol(base_task)
    move = DepthTaskPerturbation(p, seed, base_task)
    cfg.update({"task": name, "class": depth_class(cfg.get("class")), DEPTH_KEY: move.to_dict()})
    cfg["metadata"] = {k: v for k, v in cfg["metadata"].items() if k != "config_source"}
    return cfg


def variant_config(factory: Any, name: str, base: Any) -> dict[str, Any] | None:
    """The config of a built-in depth task's variant ``<task>_n<N>`` (None when ``name``
    is not one; :class:`~posgen.tasks.depth_protocol.DepthTaskError` when N is outside
    the task's range). ``base``: the index entry of a name, looked up by the caller."""
    parsed = depth_suite.parse_variant(name)
    if parsed is None:
        return None
    task, n = parsed
    cfg = dict(factory._load_full_config(base(task), None))
    cfg["metadata"] = {k: v for k, v in cfg["metadata"].items() if k != "config_source"}
    return depth_suite.variant_config(cfg, name, n)


def is_depth_task(name: str, entry: Any) -> bool:
    """Whether ``name`` is an evidence-depth task or group: a moved one
    (``perm_depth_...``) or one whose index entry declares the protocol."""
    try:
        parsed = naming.parse_name(name)
    except PerturbationError:
        return False
    if parsed is not None:
        return parsed.perturbation.moves == "passages"
    cfg = getattr(entry, "cfg", None)
    metadata = cfg.get("metadata") if isinstance(cfg, dict) else None
    return isinstance(metadata, dict) and depth_protocol.PROTOCOL_KEY in metadata
