"""The gate's kinds of cell, their margins in the user's units, and each metric's direction.

The per-cell test runs on the per-document scale of :mod:`posgen.results.stats.paired_test`
(``Δ = Σ w δ / Σ w``, ``δ_d = g_cand,d - g_base,d``, ``g`` larger = worse); a margin is
given, and every figure printed, in the unit a team reads. One row of :data:`KINDS` per
kind of cell (its unit, its ``posgen check`` flag, how ``Δ`` and a level are shown), one
field of :class:`Margins` per kind (its default); which scale a task's primary metric is
gated on follows from lm-eval's aggregation and the values it took (:func:`gate_scale`),
its direction from lm-eval's ``higher_is_better``: a new kind is a row and a field.

- ``perplexity`` (perturbed cells of a log-likelihood metric: word or byte perplexity,
  bits per byte): ``g`` is the per-document
  degradation in nats per word or byte; a cell's level is its perplexity ratio
  ``R = PPL_pert / PPL_base = exp(L)``, ``L = Σ w g / Σ w``, shown as ``R×``; the change
  and its margin are percent of that ratio, ``100 (R_cand / R_base - 1) = 100 (exp(Δ) -
  1)``, so a margin of ``M`` % is ``Δ ≤ log(1 + M/100)`` on the test's scale (exact: same
  documents, same words in both runs). A percent of the ratio means the same on a mildly
  and a heavily perturbed cell; percentage points of ``R - 1`` would not (at ``R = 7`` a
  point is a seventh of what it is at ``R = 1``: measured on the embedded model,
  ``benchmarks/gate_nearby_checkpoint.py``).
- ``accuracy`` (perturbed cells of a [0, 1] score: accuracy, exact match under any filter,
  per-question F1): ``g`` is the per-document score drop; change and margin in points of
  the score, ``100 Δ``; the level is the drop in points.
- ``length``: the NLL excess past the trained context, in nats per token (``Δ`` as is).
- ``base_perplexity`` (a task's unperturbed cell, perplexity metric): ``g`` is the
  document's NLL per word or byte, so ``Δ = log(PPL_base,cand / PPL_base,base)``; change
  and margin are percent of the unperturbed perplexity, ``100 (exp(Δ) - 1)``, the level
  that perplexity.
- ``base_accuracy`` (unperturbed [0, 1] score): ``g`` is minus the document's score, so
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
LENGTH_METRIC = "nll_excess"
# the scales a task's primary metric can be gated on: its perturbed cells' kind (its
# unperturbed cell's is ``base_`` + it)
SCALES = ("perplexity", "accuracy")


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


def gate_scale(spec, values) -> tuple[str | None, str]:
    """The scale a task's primary metric ``spec`` (a
    :class:`~posgen.results.folder.metrics.MetricSpec`) is gated on, given every
    per-document value it took (``num / den``, baseline and perturbed), or ``(None, why
    not)``, from lm-eval's aggregation, never the metric's name:

    - ``perplexity``: a log-likelihood rule (word or byte perplexity, bits per byte,
      lm-eval's ``perplexity``): the per-document value is a log-likelihood per word,
      byte or document, and the margin a percent of the perplexity ratio;
    - ``accuracy``: a mean whose per-document values all lie in [0, 1] (accuracy, exact
      match under any filter, per-question F1): the margin is in points of that score;
    - not gated: a corpus figure (BLEU, chrF, MCC, a task's own aggregation function: no
      per-document values to pair), a mean of unbounded values (no margin in its units),
      or a metric posgen cannot score (its reason).
    """
    import numpy as np

    if spec.rule is None:
        return None, spec.reason
    if spec.log_scale:
        return "perplexity", ""
    if spec.rule == "corpus":
        return None, (
            f"a corpus figure ({spec.aggregation}): no per-document values to pair, so the "
            "gate cannot test it (the report shows it with its bootstrap interval)"
        )
    v = np.asarray(values, float)
    if v.size and ((v >= 0) & (v <= 1)).all():
        return "accuracy", ""
    return None, (
        "a mean of per-document values outside [0, 1]: the gate has no margin in its units"
    )


def metric_kind(scale: str, base: bool = False) -> str:
    """The kind of a gate row: ``length`` for the length metric, else the cell's
    ``scale`` (:data:`SCALES`), ``base_`` + it for an unperturbed cell."""
    if scale == LENGTH_METRIC:
        return "length"
    if scale not in SCALES:
        raise GateInputError(f"the gate has no margin for scale {scale!r}; it gates {SCALES}")
    return f"base_{scale}" if base else scale


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
