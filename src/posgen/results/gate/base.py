"""The unperturbed cells in the CI gate: is the candidate worse before any perturbation?

A perturbed cell's level is a ratio to the model's own unperturbed score (``PPL_pert /
PPL_base``), so a checkpoint that got worse at base can look *more* tolerant: its ratio
falls because ``PPL_base`` rose. The gate therefore also tests each task's unperturbed
cell (the ``none`` cell, on the task's primary metric) in the same Holm family:
candidate vs baseline, paired by document, one-sided, fail when worse by more than the
``base_*`` margin (:mod:`posgen.results.gate.margins`).

The baseline's ``base`` section, one entry per task::

    {"task": T, "metric": M, "value": lm-eval's aggregate (PPL or accuracy),
     "docs": {"keys": [...], "w": [...], "v": [...]}}

``v``: each document's value as lm-eval logs it (``num / den``: the loglikelihood per
word or byte of a perplexity metric, the 0/1 score of accuracy), ``w``: its words or
bytes (1 for accuracy). For the test, ``g = -v`` when the metric is better when higher
(:data:`posgen.results.gate.margins.METRICS`), else ``v``: the NLL per word, minus the
score; ``δ_d = g_cand,d - g_base,d > 0`` means the candidate is worse on document ``d``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from posgen.results.gate.baseline_file import GateInputError, check_docs, check_typed
from posgen.results.gate.margins import higher_is_better

KIND = SCHEME = "none"
RATE = 0.0
ENTRY = {"task": str, "metric": str, "value": float, "docs": dict}


def base_section(cells: Iterable[Mapping[str, Any]], model: str) -> list[dict[str, Any]]:
    """Per task of ``model``: its unperturbed cell's per-document values on the task's
    primary metric (a task whose unperturbed cell has none is left out)."""
    import numpy as np

    from posgen.results.folder.schema import METRIC_RULES
    from posgen.results.scores.scoring import primary_metric
    from posgen.results.tables.tidy import aggregate

    bases = {
        c["cell"]["task"]: c for c in cells if c["model"] == model and c["cell"]["kind"] == KIND
    }
    out = []
    for task in sorted(bases):
        docs = bases[task]["docs"]
        metric = primary_metric(sorted(docs))
        if metric is None:
            continue
        higher_is_better(metric)  # refuses a metric the gate has no row for
        slot = docs[metric]
        num, den = np.asarray(slot["num"], float), np.asarray(slot["den"], float)
        rule = METRIC_RULES[metric]
        w = den if rule == "perplexity" else np.ones_like(den)
        out.append(
            {
                "task": task,
                "metric": metric,
                "value": float(aggregate(rule, num, den)),
                "docs": {
                    "keys": [str(k) for k in slot["keys"]],
                    "w": [float(x) for x in w],
                    "v": [float(x) for x in num / den],
                },
            }
        )
    return out


def base_pairs(
    baseline: list[dict[str, Any]], current: list[dict[str, Any]]
) -> list[tuple[tuple, dict[str, Any], dict[str, Any]]]:
    """(row key, baseline cell, candidate cell) per task, the key ``(task, metric,
    "none", "none", 0.0)`` and each cell's docs holding ``g`` (see the module doc)."""
    base = {(e["task"], e["metric"]): e for e in baseline}
    now = {(e["task"], e["metric"]): e for e in current}
    if set(base) != set(now):
        raise GateInputError(
            "the run and the baseline do not cover the same unperturbed cells (task, "
            f"metric): baseline {sorted(base)}, run {sorted(now)}; rerun with the "
            "baseline's settings or make a new baseline"
        )
    return [((*key, KIND, SCHEME, RATE), _as_g(base[key]), _as_g(now[key])) for key in sorted(base)]


def _as_g(entry: dict[str, Any]) -> dict[str, Any]:
    sign = -1.0 if higher_is_better(entry["metric"]) else 1.0
    docs = entry["docs"]
    return {"docs": {"keys": docs["keys"], "w": docs["w"], "g": [sign * v for v in docs["v"]]}}


def validate_base(section: Any, where: str) -> None:
    """Refuse a malformed ``base`` section of a baseline file (GateInputError)."""
    if not isinstance(section, list) or not section:
        raise GateInputError(f"{where} is corrupt: 'base' should be a non-empty list")
    seen = set()
    for i, entry in enumerate(section):
        at = f"{where}: base[{i}]"
        if not isinstance(entry, dict):
            raise GateInputError(f"{at} is not an object")
        check_typed(entry, ENTRY, at)
        check_docs(entry["docs"], f"{at}.docs", ("v",))
        higher_is_better(entry["metric"])  # a metric the gate has no row for: refused
        seen.add((entry["task"], entry["metric"]))
    if len(seen) != len(section):
        raise GateInputError(f"{where} is corrupt: a (task, metric) repeats in 'base'")
