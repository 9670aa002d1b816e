"""A task's metrics as lm-eval ran them, read from its output.

Every ``"<metric>,<filter>"`` figure lm-eval reported for the task is one
:class:`~posgen.results.folder.metrics.MetricSpec`, in the task's own order (its
``metric_list``, then its ``filter_list``). Each description comes from what lm-eval
itself used, in this order:

- ``higher_is_better``: the task's ``higher_is_better`` record in the output (what
  lm-eval computed with), else the ``metric_list`` entry, else lm-eval's registry
  default for the metric;
- ``aggregation``: the ``metric_list`` entry (a registered name, or a Python function of
  the task, which lm-eval's output keeps as source: recorded as ``function:<name>`` and
  loaded from the task's config when scored, :class:`Aggregations`), else the metric's
  registered default, else ``mean`` (lm-eval's own fallback for a metric without one).

Without a config (an output that lacks ``configs``) the registry defaults apply, as in
lm-eval for a metric its task does not describe.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from posgen.compat import internal
from posgen.results.folder.metrics import FUNCTION, MetricSpec, split_key

STDERR = "_stderr,"


def reported_keys(reported: Mapping[str, Any]) -> list[str]:
    """lm-eval's ``"<metric>,<filter>"`` keys of a task's figures (stderr keys left out)."""
    return [k for k in reported if "," in k and STDERR not in k]


def metric_specs(
    reported: Mapping[str, Any],
    samples: Iterable[Mapping[str, Any]],
    config: Mapping[str, Any] | None = None,
    higher_is_better: Mapping[str, Any] | None = None,
) -> list[MetricSpec]:
    """One spec per (metric, filter) of a task: ``reported`` is ``results[task]``,
    ``config`` is ``configs[task]`` and ``higher_is_better`` is ``higher_is_better[task]``
    of lm-eval's output; the logged ``samples`` name metrics lm-eval did not report."""
    samples = list(samples)
    pairs = [split_key(k) for k in reported_keys(reported)]
    for s in samples:
        pairs += [(m, str(s.get("filter", "none"))) for m in s.get("metrics", [])]
    pairs = list(dict.fromkeys(pairs))
    entries = _metric_entries(config)
    metric_order = _order([m for m, _ in pairs], list(entries))
    filter_order = _order([f for _, f in pairs], _filter_names(config))
    pairs.sort(key=lambda p: (metric_order[p[0]], filter_order[p[1]]))
    hib = dict(higher_is_better or {})
    return [
        MetricSpec(
            metric=m,
            filter=f,
            aggregation=_aggregation(m, entries.get(m)),
            higher_is_better=_direction(m, hib, entries.get(m)),
        )
        for m, f in pairs
    ]


def _order(found: list[str], declared: list[str]) -> dict[str, int]:
    names = list(dict.fromkeys([*(d for d in declared if d in found), *found]))
    return {n: i for i, n in enumerate(names)}


def _metric_entries(config: Mapping[str, Any] | None) -> dict[str, Mapping[str, Any]]:
    out = {}
    for entry in (config or {}).get("metric_list") or []:
        if isinstance(entry, Mapping) and isinstance(entry.get("metric"), str):
            out[entry["metric"]] = entry
    return out


def _filter_names(config: Mapping[str, Any] | None) -> list[str]:
    filters = (config or {}).get("filter_list") or []
    return [f["name"] for f in filters if isinstance(f, Mapping) and "name" in f]


def _aggregation(metric: str, entry: Mapping[str, Any] | None) -> str:
    _load_metrics()
    registered = internal("lm_eval.api.registry:AGGREGATION_REGISTRY")
    if entry is not None and "aggregation" in entry:
        agg = entry["aggregation"]
        if isinstance(agg, str) and agg in registered:
            return agg
        return FUNCTION + _function_name(agg)
    fn = internal("lm_eval.api.registry:METRIC_AGGREGATION_REGISTRY").get(metric, None)
    if fn is None:
        return "mean"  # lm-eval averages a metric without an aggregation
    return aggregation_name(fn) or FUNCTION + getattr(fn, "__name__", "?")


def aggregation_name(fn: Any) -> str | None:
    """The registered name of an aggregation function (None if it has none)."""
    registered = internal("lm_eval.api.registry:AGGREGATION_REGISTRY")
    return next((name for name in list(registered) if registered.get(name) is fn), None)


class Aggregations:
    """The aggregation function of each corpus metric: lm-eval's registered one by name,
    or the task's own Python function (``function:<name>``), taken from the task's config
    through posgen's task manager, built on first need with ``include_path`` (the folders
    of the user's own task YAMLs, as ``posgen run --include-path`` records them). A
    function that cannot be loaded gives None and the reason in :meth:`why`."""

    def __init__(self, include_path: Sequence[str] = (), task_manager: Any = None) -> None:
        self.include_path = tuple(include_path)
        self._manager = task_manager
        self._why: dict[tuple[str, str], str] = {}

    def function(self, task: str, spec: MetricSpec) -> Any:
        """The function aggregating ``spec`` of ``task`` (its base task name)."""
        if not spec.aggregation.startswith(FUNCTION):
            _load_metrics()
            return internal("lm_eval.api.registry:AGGREGATION_REGISTRY").get(spec.aggregation)
        try:
            config = self.manager().task_config(task)
        except (KeyError, ValueError) as e:
            self._why[(task, spec.key)] = f"its task config is not found ({e})"
            return None
        agg = _metric_entries(config).get(spec.metric, {}).get("aggregation")
        if not callable(agg):
            self._why[(task, spec.key)] = "its task config has no such function"
            return None
        return agg

    def why(self, task: str, spec: MetricSpec) -> str:
        name = spec.aggregation.removeprefix(FUNCTION)
        found = self._why.get((task, spec.key), "")
        return (
            f"its aggregation is a Python function of the task ({name}) that posgen could "
            f"not load: {found}; pass the task's folder with --include-path"
        )

    def manager(self) -> Any:
        if self._manager is None:
            from posgen.tasks.lm_eval_tasks import shared_task_manager

            self._manager = shared_task_manager(self.include_path)
        return self._manager


def _function_name(agg: Any) -> str:
    """A function's name: from the function itself (a loaded config), or from the source
    lm-eval's output keeps of it."""
    if callable(agg):
        return getattr(agg, "__name__", "?")
    found = re.search(r"def\s+(\w+)", str(agg))
    return found.group(1) if found else str(agg)[:40]


def _direction(metric: str, hib: Mapping[str, Any], entry: Mapping[str, Any] | None) -> bool | None:
    if isinstance(hib.get(metric), bool):
        return hib[metric]
    if entry is not None and isinstance(entry.get("higher_is_better"), bool):
        return entry["higher_is_better"]
    _load_metrics()
    default = internal("lm_eval.api.registry:HIGHER_IS_BETTER_REGISTRY").get(metric, None)
    return default if isinstance(default, bool) else None


def _load_metrics() -> None:
    """lm-eval registers its metrics and aggregations when ``lm_eval.api.metrics`` loads."""
    import lm_eval.api.metrics  # noqa: F401


def declared_specs(config: Mapping[str, Any]) -> list[MetricSpec]:
    """The specs a task's config declares, before it runs (``posgen run`` checks them
    before any model loads): its ``metric_list`` (or lm-eval's defaults for its
    ``output_type``) under each of its filters (``none`` without a ``filter_list``)."""
    _load_metrics()
    entries = _metric_entries(config)
    if not entries:
        defaults = internal("lm_eval.api.registry:DEFAULT_METRIC_REGISTRY")
        names = list(defaults.get(config.get("output_type", "generate_until"), []))
    else:
        names = list(entries)
    filters = _filter_names(config) or ["none"]
    return [
        MetricSpec(m, f, _aggregation(m, entries.get(m)), _direction(m, {}, entries.get(m)))
        for m in names
        for f in filters
    ]
