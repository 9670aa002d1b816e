"""Which scale a task's primary metric is gated on, from lm-eval's description of it."""

from __future__ import annotations

import pytest

from posgen.results.folder.metrics import MetricSpec
from posgen.results.gate.baseline_file import GateInputError
from posgen.results.gate.margins import gate_scale, metric_kind


@pytest.mark.parametrize(
    ("spec", "values", "scale"),
    [
        (
            MetricSpec("word_perplexity", aggregation="weighted_perplexity"),
            [-3.1, -2.0],
            "perplexity",
        ),
        (MetricSpec("bits_per_byte", aggregation="bits_per_byte"), [-1.0], "perplexity"),
        (MetricSpec("acc"), [0.0, 1.0], "accuracy"),
        (MetricSpec("exact_match", filter="strict-match"), [1.0, 0.0, 1.0], "accuracy"),
        (MetricSpec("f1"), [0.25, 0.8], "accuracy"),  # per-question F1: a [0, 1] mean
    ],
)
def test_log_likelihood_metrics_and_unit_interval_means_are_gated(spec, values, scale):
    assert gate_scale(spec, values) == (scale, "")


@pytest.mark.parametrize(
    ("spec", "values", "why"),
    [
        (MetricSpec("bleu", aggregation="bleu"), [], "a corpus figure (bleu)"),
        (MetricSpec("mcc", aggregation="matthews_corrcoef"), [], "no per-document values"),
        (MetricSpec("rouge", aggregation="mean"), [12.5, 40.0], "outside [0, 1]"),
        (MetricSpec("bypass", aggregation="bypass"), [], "bypass"),
        (MetricSpec("x", higher_is_better=None), [0.5], "no higher_is_better"),
    ],
)
def test_what_the_gate_cannot_test_is_named_with_the_reason(spec, values, why):
    scale, reason = gate_scale(spec, values)
    assert scale is None and why in reason


def test_a_scale_without_a_margin_is_refused():
    assert metric_kind("accuracy", base=True) == "base_accuracy"
    assert metric_kind("nll_excess") == "length"
    with pytest.raises(GateInputError, match="no margin for scale 'bleu'"):
        metric_kind("bleu")
