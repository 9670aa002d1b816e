"""The gate's margins, in the user's units per kind of metric, and its stated power.

The per-cell test runs on the per-document scale of :mod:`posgen.results.stats.paired_test`
(``Δ = Σ w δ / Σ w``); a margin is given, and every figure printed, in the unit a team
reads:

- ``perplexity`` (word or byte perplexity): a cell's level is its perplexity ratio
  ``R = PPL_pert / PPL_base = exp(L)``, ``L = Σ w g / Σ w`` (nats per word), shown as
  ``R×``; the change and its margin are percent of that ratio,
  ``100 (R_cand / R_base - 1) = 100 (exp(Δ) - 1)``, so a margin of ``M`` % is
  ``Δ ≤ log(1 + M/100)`` on the test's scale (exact: same documents, same words in both
  runs). A percent of the ratio means the same on a mildly and a heavily perturbed
  cell; percentage points of the relative degradation ``R - 1`` would not (at
  ``R = 7`` a point is a seventh of what it is at ``R = 1``: measured on the embedded
  model, ``benchmarks/gate_nearby_checkpoint.py``).
- ``accuracy``: ``g`` is the per-document score drop (0 or ±1); change and margin in
  accuracy points, ``100 Δ``.
- ``length``: the NLL excess past the trained context, in nats per token (``Δ`` as is).

Stated power. With ``n`` documents, the observed paired standard error ``se =
sd(δ)/√n`` (weighted, :func:`posgen.results.stats.paired_test.weighted_paired_t`) and
``m`` cells under Holm, a cell fails with 80 % power once its true change exceeds

    MDE = margin + (t_{1-α/m, n-1} + t_{0.8, n-1}) · se

(α/m: Holm's first, strictest step, i.e. the threshold of a cell when it is the only
one that changed; later steps are looser, so this is conservative). A cell "cannot
detect a change of its margin's size" when the noise term exceeds the margin, i.e. when
a true change of twice the margin is caught with less than 80 % power; the documents
that would suffice solve ``(t_{1-α/m, n'-1} + t_{0.8, n'-1}) · sd(δ) / √n' ≤ margin``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

POWER = 0.8
UNITS = {"perplexity": "% ratio", "accuracy": "points", "length": "nats/token"}
# the flags of ``posgen check`` that set each kind's margin
FLAGS = {"perplexity": "--margin-ppl", "accuracy": "--margin-acc", "length": "--margin-length"}


@dataclass(frozen=True)
class Margins:
    """Regression allowed per cell before the gate fails it, in the user's units."""

    perplexity: float = 2.0  # percent of the perplexity ratio PPL_pert / PPL_base
    accuracy: float = 5.0  # accuracy points
    length: float = 0.05  # nats per token of NLL excess past the trained context

    def __post_init__(self) -> None:
        for kind, flag in FLAGS.items():
            v = getattr(self, kind)
            if not (isinstance(v, (int, float)) and math.isfinite(v) and v >= 0):
                raise ValueError(f"{flag} must be a finite number >= 0, got {v!r}")

    def of(self, kind: str) -> float:
        return float(getattr(self, kind))


def metric_kind(metric: str, rule: str | None) -> str:
    """``perplexity``, ``accuracy`` or ``length`` for a gate row's metric."""
    if metric == "nll_excess":
        return "length"
    return "perplexity" if rule == "perplexity" else "accuracy"


def to_user(kind: str, delta: float) -> float:
    """A change ``delta`` on the test's scale in the user's unit (see the module doc)."""
    if kind == "perplexity":
        return 100.0 * math.expm1(delta)
    return 100.0 * delta if kind == "accuracy" else delta


def level_in_user(kind: str, level: float) -> float:
    """A cell's level ``Σ w g / Σ w`` as shown: the perplexity ratio (×), the accuracy
    drop in points, the length excess in nats per token."""
    if kind == "perplexity":
        return math.exp(level)
    return 100.0 * level if kind == "accuracy" else level


def margin_on_test_scale(kind: str, margin: float) -> float:
    """The margin in the user's unit as a bound on ``Δ`` (the inverse of :func:`to_user`)."""
    if kind == "perplexity":
        return math.log1p(margin / 100.0)
    return margin / 100.0 if kind == "accuracy" else margin


def noise_term(n: int, cells: int, alpha: float) -> float:
    """``t_{1-α/m, n-1} + t_{0.8, n-1}``: the detectable excess over the margin in se."""
    from scipy import stats

    return float(stats.t.ppf(1 - alpha / cells, n - 1) + stats.t.ppf(POWER, n - 1))


def documents_needed(sd: float, margin: float, cells: int, alpha: float, cap: int = 10**6):
    """The smallest n' >= 2 with ``(t_{1-α/m, n'-1} + t_{0.8, n'-1}) sd / √n' <= margin``
    (``sd`` and ``margin`` on the test's scale); None when not even ``cap`` would do."""

    def enough(n: int) -> bool:
        return noise_term(n, cells, alpha) * sd / math.sqrt(n) <= margin

    if sd <= 0:
        return 2
    if margin <= 0 or not enough(cap):
        return None
    lo, hi = 1, 2  # enough(hi) is monotone in n: double, then bisect
    while not enough(hi):
        lo, hi = hi, hi * 2
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (lo, mid) if enough(mid) else (mid, hi)
    return hi
