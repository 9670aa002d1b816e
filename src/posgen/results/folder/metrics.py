"""What posgen knows about a metric: lm-eval's description of it, and how posgen scores it.

lm-eval describes every metric of a task by its name, the filter its per-document values
went through (``exact_match`` under ``strict-match`` and under ``flexible-extract`` are two
metrics), the aggregation that turns per-document values into the task's figure, and
whether a higher figure is better. posgen reads all four from the task's lm-eval output
(:mod:`posgen.results.tables.metric_list`) and scores each (metric, filter) on its own.

How it is scored follows from the aggregation, never from the metric's name:

- ``perplexity`` rule (``weighted_perplexity``: per document ``(ll, weight)``, figure
  ``exp(-Σ ll / Σ weight)``; ``perplexity``: per document ``ll``, figure ``exp(-mean ll)``);
- ``bits_per_byte`` rule (per document ``(ll, bytes)``, figure ``-Σ ll / Σ bytes / ln 2``);
- ``mean`` rule (per document a number, figure its mean);
- ``corpus`` rule: every other aggregation lm-eval registers (``bleu``, ``chrf``,
  ``chrf++``, ``ter``, ``matthews_corrcoef``, ``f1``, ``brier_score``, ``median``,
  ``nanmean``) and a Python function in the task's YAML (IFEval's
  ``agg_inst_level_acc``, loaded from the task's config): computed over the whole set of
  per-document items, with the task's own function;
- not scorable: ``bypass`` (lm-eval reports 999, no score), a metric without
  ``higher_is_better`` (which way is worse is unknown), per-document values of another
  shape than the rule needs, or a task function posgen cannot load (its task config is
  not found). Such a metric is named with its reason wherever results are shown, never
  dropped silently.

Direction: ``higher_is_better`` says which way is worse; every degradation posgen reports
is ``> 0`` for worse.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from typing import Any

# lm-eval aggregation -> the per-document rule posgen scores it with
PER_DOCUMENT_RULES = {
    "weighted_perplexity": "perplexity",
    "perplexity": "perplexity",
    "bits_per_byte": "bits_per_byte",
    "mean": "mean",
}
NOT_SCORED = {"bypass": "lm-eval's bypass aggregation reports no score (999)"}
# the marker of an aggregation given as a Python function: "function:<its name>"
FUNCTION = "function:"
RULES = ("perplexity", "bits_per_byte", "mean", "corpus")


@dataclass(frozen=True)
class MetricSpec:
    """One (metric, filter) of a task as lm-eval ran it.

    ``aggregation`` is lm-eval's registered aggregation name (``mean``, ``bleu``, ...) or
    ``function:<name>`` for a Python function in the task's YAML; ``higher_is_better`` is None
    when lm-eval recorded none; ``unscorable`` is set when the logged per-document values
    do not fit the rule (why, in one phrase).
    """

    metric: str
    filter: str = "none"
    aggregation: str = "mean"
    higher_is_better: bool | None = True
    unscorable: str = ""

    @property
    def key(self) -> str:
        """lm-eval's key of the metric's figure: ``"<metric>,<filter>"``."""
        return f"{self.metric},{self.filter}"

    @property
    def reason(self) -> str:
        """Why posgen cannot score it; ``""`` when it can."""
        if self.unscorable:
            return self.unscorable
        if self.aggregation in NOT_SCORED:
            return NOT_SCORED[self.aggregation]
        if self.higher_is_better is None:
            return "lm-eval records no higher_is_better for it, so which way is worse is unknown"
        return ""

    @property
    def rule(self) -> str | None:
        """``perplexity``, ``bits_per_byte``, ``mean`` or ``corpus``; None if not scorable."""
        if self.reason:
            return None
        return PER_DOCUMENT_RULES.get(self.aggregation, "corpus")

    @property
    def per_document(self) -> bool:
        """Scored from per-document numbers (paired per document), not a corpus figure."""
        return self.rule in ("perplexity", "bits_per_byte", "mean")

    @property
    def log_scale(self) -> bool:
        """Its per-document values are log-likelihood sums (perplexity, bits per byte)."""
        return self.rule in ("perplexity", "bits_per_byte")

    @property
    def label(self) -> str:
        """``exact_match (strict-match)``; the bare name under lm-eval's ``none`` filter."""
        return self.metric if self.filter == "none" else f"{self.metric} ({self.filter})"

    def ratio_sign(self) -> int:
        """+1 when a larger per-document ratio ``num/den`` is better, else -1.

        The ratio is the score itself for ``mean`` and ``ll`` per word, byte or document
        for the log rules, whose figure falls as the ratio rises.
        """
        better_when_larger = bool(self.higher_is_better) != self.log_scale
        return 1 if better_when_larger else -1

    def with_problem(self, why: str) -> MetricSpec:
        return replace(self, unscorable=why)

    def to_dict(self) -> dict[str, Any]:
        out = asdict(self)
        if not self.unscorable:
            del out["unscorable"]
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MetricSpec:
        hib = d.get("higher_is_better")
        return cls(
            metric=str(d["metric"]),
            filter=str(d.get("filter", "none")),
            aggregation=str(d.get("aggregation", "mean")),
            higher_is_better=None if hib is None else bool(hib),
            unscorable=str(d.get("unscorable", "")),
        )


def split_key(key: str) -> tuple[str, str]:
    """``"exact_match,strict-match"`` -> ``("exact_match", "strict-match")``."""
    metric, _, filt = key.rpartition(",")
    return (metric, filt) if metric else (key, "none")
