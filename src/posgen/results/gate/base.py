"""The unperturbed cells in the CI gate: is the candidate worse before any perturbation?

A perturbed cell's level is a ratio to the model's own unperturbed score (``PPL_pert /
PPL_base``), so a checkpoint that got worse at base can look *more* tolerant: its ratio
falls because ``PPL_base`` rose. The gate therefore also tests each task's unperturbed
cell (the ``none`` cell, on the task's primary metric) in the same Holm family:
candidate vs baseline, paired by document, one-sided, fail when worse by more than the
``base_*`` margin (:mod:`posgen.results.gate.margins`).

The baseline's ``base`` section, one entry per task::

    {"task": T, "metric": M (with its filter), "lm_eval_key": "<metric>,<filter>",
     "scale": "perplexity" | "accuracy", "larger_is_better": bool,
     "value": lm-eval's aggregate (PPL or the score),
     "docs": {"keys": [...], "w": [...], "v": [...]}}

``v``: each document's value as lm-eval logs it (``num / den``: the loglikelihood per
word or byte of a perplexity metric, the score of a [0, 1] metric), ``w``: its words or
bytes (1 for a score). For the test, ``g = -v`` when a larger value is better
(``larger_is_better``: the loglikelihood, a score lm-eval records as higher is better),
else ``v``: the NLL per word, minus the score; ``δ_d = g_cand,d - g_base,d > 0`` means
the candidate is worse on document ``d``. The scale: :func:`posgen.results.gate.margins.gate_scale`.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from posgen.results.gate.baseline_file import GateInputError, check_docs, check_typed
from posgen.results.gate.margins import SCALES, gate_scale
from posgen.results.scores.metric_units import primary
from posgen.results.tables.documents import aggregate
from posgen.results.tables.tidy import specs_of

KIND = SCHEME = "none"
RATE = 0.0
ENTRY = {
    "task": str,
    "metric": str,
    "lm_eval_key": str,
    "scale": str,
    "larger_is_better": bool,
    "value": float,
    "docs": dict,
}


def base_section(cells: Iterable[Mapping[str, Any]], model: str) -> list[dict[str, Any]]:
    """Per task of ``model``: its unperturbed cell's per-document values on the task's
    primary metric (a task whose primary metric cannot be gated is left out: the
    perturbed cells' ``not_gated`` says why)."""
    import numpy as np

    bases = {
        c["cell"]["task"]: c for c in cells if c["model"] == model and c["cell"]["kind"] == KIND
    }
    out = []
    for task in sorted(bases):
        spec = primary(specs_of(bases[task]))
        slot = bases[task]["docs"].get(spec.key) if spec is not None else None
        if slot is None or not spec.per_document:
            continue
        num, den = np.asarray(slot["num"], float), np.asarray(slot["den"], float)
        scale, _ = gate_scale(spec, num / den)
        if scale is None:
            continue
        w = den if scale == "perplexity" else np.ones_like(den)
        out.append(
            {
                "task": task,
                "metric": spec.label,
                "lm_eval_key": spec.key,
                "scale": scale,
                "larger_is_better": spec.ratio_sign() > 0,
                "value": float(aggregate(spec.rule, num, den)),
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
    sign = -1.0 if entry["larger_is_better"] else 1.0
    docs = entry["docs"]
    return {
        "scale": entry["scale"],
        "docs": {"keys": docs["keys"], "w": docs["w"], "g": [sign * v for v in docs["v"]]},
    }


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
        if entry["scale"] not in SCALES:
            raise GateInputError(f"{at}: scale {entry['scale']!r} is not one of {SCALES}")
        seen.add((entry["task"], entry["metric"]))
    if len(seen) != len(section):
        raise GateInputError(f"{where} is corrupt: a (task, metric) repeats in 'base'")
