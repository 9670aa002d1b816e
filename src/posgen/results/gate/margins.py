"""The gate's kinds of cell, their margins in the user's units, and each metric's direction.

The per-cell test runs on the per-document scale of :mod:`posgen.results.stats.paired_test`
(``Δ = Σ w δ / Σ w``, ``δ_d = g_cand,d - g_base,d``, ``g`` larger = worse); a margin is
given, and every figure printed, in the unit a team reads. One row of :data:`KINDS` per
kind of cell (its unit, its ``posgen check`` flag, how ``Δ`` and a level are shown), one
field of :class:`Margins` per kind (its default), one row of :data:`METRICS` per metric
the gate reads (the kind of its perturbed cells, and whether lm-eval's per-document value
is better when higher): a new metric or kind is a row in each, nothing else.

- ``perplexity`` (perturbed cells of word or byte perplexity): ``g`` is the per-document
  degradation in nats per word or byte; a cell's level is its perplexity ratio
  ``R = PPL_pert / PPL_base = exp(L)``, ``L = Σ w g / Σ w``, shown as ``R×``; the change
  and its margin are percent of that ratio, ``100 (R_cand / R_base - 1) = 100 (exp(Δ) -
  1)``, so a margin of ``M`` % is ``Δ ≤ log(1 + M/100)`` on the test's scale (exact: same
  documents, same words in both runs). A percent of the ratio means the same on a mildly
  and a heavily perturbed cell; percentage points of ``R - 1`` would not (at ``R = 7`` a
  point is a seventh of what it is at ``R = 1``: measured on the embedded model,
  ``benchmarks/gate_nearby_checkpoint.py``).
- ``accuracy`` (perturbed accuracy cells): ``g`` is the per-document score drop (0 or ±1);
  change and margin in accuracy points, ``100 Δ``; the level is the drop in points.
- ``length``: the NLL excess past the trained context, in nats per token (``Δ`` as is).
- ``base_perplexity`` (a task's unperturbed cell, perplexity metric): ``g`` is the
  document's NLL per word or byte, so ``Δ = log(PPL_base,cand / PPL_base,base)``; change
  and margin are percent of the unperturbed perplexity, ``100 (exp(Δ) - 1)``, the level
  that perplexity.
- ``base_accuracy`` (unperturbed accuracy): ``g`` is minus the document's score, so
  ``100 Δ`` is the accuracy lost, in points; the level is the accuracy in points.

The unperturbed cells matter because a perturbed cell's ratio ``PPL_pert / PPL_base``
falls when ``PPL_base`` rises: a damaged checkpoint can look more tolerant.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, fields

from posgen.results.gate.baseline_file import GateInputError


@dataclass(frozen=True)
class CellKind:
    """How one kind of gate cell is read: ``unit`` of change, interval, margin and MDE;
    ``flag`` of ``posgen check`` setting its margin; ``scale`` of a change (``log``:
    ``100 (exp(Δ) - 1)`` %, ``points``: ``100 Δ``, ``raw``: ``Δ``); ``level``: how a level
    ``L = Σ w g / Σ w`` is shown (``exp``: ``exp(L)``, ``points``: ``100 L``, ``minus
    points``: ``-100 L``, ``raw``: ``L``) and ``level_format`` its format."""

    unit: str
    flag: str
    scale: str
    level: str
    level_format: str


KINDS = {
    "perplexity": CellKind("% ratio", "--margin-ppl", "log", "exp", "{:.4f}x"),
    "accuracy": CellKind("points", "--margin-acc", "points", "points", "{:.3f}"),
    "length": CellKind("nats/token", "--margin-length", "raw", "raw", "{:.3f}"),
    "base_perplexity": CellKind("% PPL", "--margin-base-ppl", "log", "exp", "{:.2f}"),
    "base_accuracy": CellKind("points", "--margin-base-acc", "points", "minus points", "{:.2f}"),
}
UNITS = {kind: k.unit for kind, k in KINDS.items()}
FLAGS = {kind: k.flag for kind, k in KINDS.items()}
# per metric: the kind of its perturbed cells (its unperturbed cell's is ``base_`` + it)
# and whether lm-eval's per-document value is better when higher (perplexities: the
# loglikelihood per word or byte; acc, acc_norm: the 0/1 score)
METRICS = {
    "word_perplexity": ("perplexity", True),
    "byte_perplexity": ("perplexity", True),
    "acc": ("accuracy", True),
    "acc_norm": ("accuracy", True),
}
LENGTH_METRIC = "nll_excess"


@dataclass(frozen=True)
class Margins:
    """Change allowed per cell before the gate fails it, in each kind's unit."""

    perplexity: float = 2.0  # percent of the perplexity ratio PPL_pert / PPL_base
    accuracy: float = 5.0  # accuracy points of extra drop
    length: float = 0.05  # nats per token of NLL excess past the trained context
    base_perplexity: float = 1.0  # percent of the unperturbed perplexity PPL_base
    base_accuracy: float = 5.0  # accuracy points lost unperturbed

    def __post_init__(self) -> None:
        for f in fields(self):
            v = getattr(self, f.name)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise GateInputError(f"{FLAGS[f.name]} must be a finite number >= 0, got {v!r}")

    def of(self, kind: str) -> float:
        return float(getattr(self, kind))


def metric_kind(metric: str, base: bool = False) -> str:
    """The kind of a gate row on ``metric`` (its unperturbed cell when ``base``)."""
    if metric == LENGTH_METRIC:
        return "length"
    if metric not in METRICS:
        raise GateInputError(
            f"the gate has no margin for metric {metric!r}; it gates {sorted(METRICS)}"
        )
    kind = METRICS[metric][0]
    return f"base_{kind}" if base else kind


def higher_is_better(metric: str) -> bool:
    """Whether lm-eval's per-document value of ``metric`` is better when higher."""
    metric_kind(metric)  # refuses a metric the gate has no row for
    return METRICS[metric][1]


def to_user(kind: str, delta: float) -> float:
    """A change ``delta`` on the test's scale in the kind's unit (see the module doc)."""
    scale = KINDS[kind].scale
    if scale == "log":
        return 100.0 * math.expm1(delta)
    return 100.0 * delta if scale == "points" else delta


def margin_on_test_scale(kind: str, margin: float) -> float:
    """The margin in the kind's unit as a bound on ``Δ`` (the inverse of :func:`to_user`)."""
    scale = KINDS[kind].scale
    if scale == "log":
        return math.log1p(margin / 100.0)
    return margin / 100.0 if scale == "points" else margin


def level_in_user(kind: str, level: float) -> float:
    """A cell's level ``L = Σ w g / Σ w`` as shown (see :class:`CellKind`)."""
    how = KINDS[kind].level
    if how == "exp":
        return math.exp(level)
    if how == "points":
        return 100.0 * level
    return -100.0 * level if how == "minus points" else level


def format_level(kind: str, value: float) -> str:
    return KINDS[kind].level_format.format(value)
