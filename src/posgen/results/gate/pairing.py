"""What same-seed pairing rests on, recorded in a baseline and checked against a run.

``posgen check`` pairs each document of the candidate with the same document of the
baseline. With the same settings below, both runs see byte-identical perturbations of
every document (seeding is per (seed, perturbation, document)), so the paired
difference holds only the change of the model: that is the CI recipe. A baseline
records (``pairing``):

- ``suite`` (suite, tasks, suite version) and ``limits`` (documents per task);
- ``seed`` and ``seeds`` (the perturbation draws);
- ``num_fewshot`` and ``apply_chat_template`` (lm-eval's prompts);
- ``perturbations``: the version of every swept perturbation, ``{"kind/scheme": v}``.

A candidate that differs in any of them is refused (exit status 2, naming the setting
and both values). Only ``seed`` and ``seeds`` may differ, with ``--allow-other-seed``:
the comparison then includes the perturbation draw's noise (stated in the output);
another suite, other limits, prompts or perturbation versions measure something else.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from posgen.results.folder.config import RunConfig
from posgen.results.gate.baseline_file import GateInputError

DRAW = ("seed", "seeds")  # what --allow-other-seed lets differ
SETTINGS = ("suite", "limits", "num_fewshot", "apply_chat_template", "perturbations", *DRAW)


def pairing_record(
    config: RunConfig, cells: Iterable[Mapping[str, Any]], model: str
) -> dict[str, Any]:
    """The pairing settings of ``model``'s run from its ``config`` and cell records."""
    versions: dict[str, int] = {}
    for c in cells:
        cell = c["cell"]
        if c["model"] == model and cell["kind"] != "none":
            versions.setdefault(
                f"{cell['kind']}/{cell['scheme']}", int(cell["perturbation_version"])
            )
    return {
        "suite": {
            "suite": config.suite,
            "tasks": list(config.tasks),
            "suite_version": config.suite_version,
        },
        "limits": dict(config.limits),
        "seed": config.seed,
        "seeds": config.seeds,
        "num_fewshot": config.num_fewshot,
        "apply_chat_template": config.apply_chat_template,
        "perturbations": dict(sorted(versions.items())),
    }


def check_pairing(
    baseline: dict[str, Any], current: dict[str, Any], allow_other_seed: bool
) -> list[str]:
    """Refuse a run whose pairing settings differ from the baseline's
    (:class:`GateInputError` naming each with both values). Returns the draw settings
    that differ and were allowed (``--allow-other-seed``), as ``"seed: 1 vs 2"``."""
    diffs = [(k, baseline[k], current[k]) for k in SETTINGS if baseline.get(k) != current.get(k)]
    fixed = [d for d in diffs if d[0] not in DRAW]
    draw = [d for d in diffs if d[0] in DRAW]
    if fixed:
        raise GateInputError(
            "the run cannot be paired with the baseline: "
            + "; ".join(f"{k} differs (baseline {a!r}, run {b!r})" for k, a, b in fixed)
            + "; rerun with the baseline's settings, or make a new baseline"
        )
    if draw and not allow_other_seed:
        raise GateInputError(
            "the run used other perturbation draws than the baseline: "
            + "; ".join(f"{k} differs (baseline {a!r}, run {b!r})" for k, a, b in draw)
            + "; rerun with the baseline's --seed/--seeds (the CI recipe), or pass "
            "--allow-other-seed to compare with the draw noise included"
        )
    return [f"{k} {a!r} vs {b!r}" for k, a, b in draw]


def validate_pairing(pairing: Any, where: str) -> None:
    """Refuse a malformed ``pairing`` section of a baseline file (GateInputError)."""
    if not isinstance(pairing, dict):
        raise GateInputError(f"{where} is corrupt: 'pairing' should be an object")
    missing = [k for k in SETTINGS if k not in pairing]
    if missing:
        raise GateInputError(f"{where}.pairing is corrupt: missing {missing}")
    if not isinstance(pairing["seeds"], int) or isinstance(pairing["seeds"], bool):
        raise GateInputError(f"{where}.pairing is corrupt: 'seeds' should be an integer")
    for key in ("suite", "limits", "perturbations"):
        if not isinstance(pairing[key], dict):
            raise GateInputError(f"{where}.pairing is corrupt: {key!r} should be an object")
