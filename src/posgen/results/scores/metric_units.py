"""The unit each metric's degradation is measured in, its tolerance threshold, and which
metrics of a task the report plots and the gate tests.

Degradation ``D`` is always ``> 0`` for worse (direction from lm-eval's
``higher_is_better``), in one of four units:

- ``relative`` (perplexity rule): ``PPL_pert / PPL_base - 1``; threshold ``threshold_ppl``
  (the scoring config's, +10 % by default);
- ``bits`` (bits_per_byte): the rise in bits per byte, ``log2`` of the byte-perplexity
  ratio; threshold ``log2(1 + threshold_ppl)``, the same tolerance as perplexity's;
- ``fraction`` (a mean whose per-document values all lie in [0, 1]: accuracy, exact
  match, per-question F1): the move toward worse on the metric's own [0, 1] scale
  (x 100 = points); threshold ``threshold_acc`` (0.05 = 5 points);
- ``metric`` (a corpus figure such as BLEU, chrF, TER or MCC, or a mean of unbounded
  values): the move toward worse in the metric's own units; threshold
  ``threshold_ppl · |baseline|`` (10 % of the unperturbed figure), since posgen knows no
  absolute scale for it.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from posgen.results.folder.config import Scoring
from posgen.results.folder.metrics import MetricSpec

UNITS = ("relative", "bits", "fraction", "metric")


def unit_of(rule: str, in_unit_interval: bool) -> str:
    """The unit of a metric's degradation from its rule (and, for means, whether every
    per-document value it took lies in [0, 1])."""
    if rule == "perplexity":
        return "relative"
    if rule == "bits_per_byte":
        return "bits"
    return "fraction" if rule == "mean" and in_unit_interval else "metric"


def threshold(cfg: Scoring, unit: str, baseline: float) -> float:
    """The tolerance threshold of a curve in its unit (module doc)."""
    if unit == "relative":
        return cfg.threshold_ppl
    if unit == "bits":
        return math.log2(1.0 + cfg.threshold_ppl)
    if unit == "fraction":
        return cfg.threshold_acc
    return cfg.threshold_ppl * abs(baseline) if math.isfinite(baseline) else math.nan


def measurable(unit: str, higher_is_better: bool, baseline: float, thr: float) -> bool:
    """Whether a degradation beyond ``thr`` is possible at all: a [0, 1] score cannot drop
    below 0 (or rise above 1), so a model at (or near) the worst end shows no degradation
    whatever the perturbation does, and its tolerance would be meaningless; a relative
    threshold of an unperturbed figure of 0 is 0."""
    if unit in ("relative", "bits"):
        return True
    if unit == "fraction":
        room = baseline if higher_is_better else 1.0 - baseline
        return room > thr
    return math.isfinite(thr) and thr > 0


def threshold_text(unit: str, thr: float, label: str, higher_is_better: bool) -> str:
    """The threshold as the report writes it: ``+10% PPL``, ``-0.05 acc``, ``-3.2 bleu``."""
    if unit == "relative":
        return f"+{thr:.0%} PPL"
    if unit == "bits":
        return f"+{thr:.3g} bits/byte"
    return f"{'-' if higher_is_better else '+'}{thr:.3g} {label}"


def axis_text(unit: str, label: str, higher_is_better: bool) -> str:
    """A figure's y label: what ``D`` measures."""
    if unit == "relative":
        return f"{label}: relative increase"
    if unit == "bits":
        return f"{label}: rise (bits/byte)"
    return f"{label}: {'drop' if higher_is_better else 'rise'}"


def primary(specs: Sequence[MetricSpec]) -> MetricSpec | None:
    """The metric a task's tolerance is quoted on: its first scorable (metric, filter) in
    lm-eval's order (word perplexity for posgen_prose, acc for multiple choice)."""
    return next((s for s in specs if s.rule is not None), None)


def shown(specs: Sequence[MetricSpec]) -> list[MetricSpec]:
    """The metrics a task is plotted and gated on: every scorable (metric, filter), the
    log-likelihood ones (word and byte perplexity, bits per byte, which rescale one
    another on the same documents) by their first only."""
    out, log_seen = [], False
    for s in specs:
        if s.rule is None or (s.log_scale and log_seen):
            continue
        log_seen = log_seen or s.log_scale
        out.append(s)
    return out
