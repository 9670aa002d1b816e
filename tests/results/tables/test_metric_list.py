"""A task's metrics as lm-eval describes them, and what posgen can score (unit tier)."""

from __future__ import annotations

import math

import pytest

from posgen.results.folder.metrics import MetricSpec
from posgen.results.tables.documents import extract_docs
from posgen.results.tables.metric_list import declared_specs, metric_specs

GSM8K_LIKE = {
    "output_type": "generate_until",
    "metric_list": [
        {"metric": "exact_match", "aggregation": "mean", "higher_is_better": True},
        {"metric": "ter", "aggregation": "ter", "higher_is_better": False},
        {"metric": "inst_acc", "aggregation": "def agg_inst_level_acc(items):\n    ..."},
        {"metric": "bypass", "aggregation": "bypass", "higher_is_better": True},
    ],
    "filter_list": [{"name": "strict-match"}, {"name": "flexible-extract"}],
}


def _reported(*keys: str) -> dict:
    out = {"alias": "t", "sample_len": 2}
    for k in keys:
        metric, filt = k.split(",")
        out[k], out[f"{metric}_stderr,{filt}"] = 0.5, "N/A"
    return out


def test_each_metric_and_filter_is_one_spec_in_the_tasks_order():
    # lm-eval reports filter by filter; posgen keeps the metric_list's order, then filters'
    reported = _reported(
        "bypass,flexible-extract",
        "exact_match,flexible-extract",
        "exact_match,strict-match",
        "ter,strict-match",
        "ter,flexible-extract",
        "inst_acc,strict-match",
        "inst_acc,flexible-extract",
        "bypass,strict-match",
    )
    hib = {"exact_match": True, "ter": False, "inst_acc": True, "bypass": True}
    specs = metric_specs(reported, [], GSM8K_LIKE, hib)
    assert [s.key for s in specs] == [
        "exact_match,strict-match",
        "exact_match,flexible-extract",
        "ter,strict-match",
        "ter,flexible-extract",
        "inst_acc,strict-match",
        "inst_acc,flexible-extract",
        "bypass,strict-match",
        "bypass,flexible-extract",
    ]
    rules = {s.metric: s.rule for s in specs}
    # a task's own aggregation function is a corpus figure: loaded from the task's config
    assert rules == {"exact_match": "mean", "ter": "corpus", "inst_acc": "corpus", "bypass": None}
    by = {s.metric: s for s in specs}
    assert by["ter"].higher_is_better is False  # from lm-eval, not from the name
    assert by["inst_acc"].aggregation == "function:agg_inst_level_acc"
    assert "999" in by["bypass"].reason


def test_direction_comes_from_lm_evals_record_not_the_metric_name():
    # a task may declare any direction; posgen follows what lm-eval computed with
    cfg = {"metric_list": [{"metric": "acc", "aggregation": "mean", "higher_is_better": True}]}
    (spec,) = metric_specs(_reported("acc,none"), [], cfg, {"acc": False})
    assert spec.higher_is_better is False and spec.ratio_sign() == -1
    (spec,) = metric_specs(_reported("acc,none"), [], cfg, {})
    assert spec.higher_is_better is True and spec.ratio_sign() == 1


def test_without_a_metric_list_lm_evals_registry_defaults_apply():
    reported = _reported("word_perplexity,none", "bits_per_byte,none", "mystery,none")
    specs = {s.metric: s for s in metric_specs(reported, [], {"output_type": "x"}, {})}
    assert specs["word_perplexity"].aggregation == "weighted_perplexity"
    assert specs["word_perplexity"].higher_is_better is False
    assert specs["bits_per_byte"].rule == "bits_per_byte"
    # a metric lm-eval knows nothing of: averaged (lm-eval's fallback), no direction
    assert specs["mystery"].aggregation == "mean" and specs["mystery"].rule is None
    assert "higher_is_better" in specs["mystery"].reason


def test_declared_specs_read_a_config_before_it_runs():
    assert [s.key for s in declared_specs(GSM8K_LIKE)][:2] == [
        "exact_match,strict-match",
        "exact_match,flexible-extract",
    ]
    rolling = declared_specs({"output_type": "loglikelihood_rolling"})
    assert [s.metric for s in rolling] == ["word_perplexity", "byte_perplexity", "bits_per_byte"]
    assert all(s.rule is not None and s.filter == "none" for s in rolling)
    only = declared_specs({"metric_list": [{"metric": "bypass", "aggregation": "bypass"}]})
    assert [s.rule for s in only] == [None]


def _samples(values: list, filt: str = "none", metric: str = "m") -> list[dict]:
    return [
        {"doc_id": i, "doc": {"id": f"d{i}"}, "filter": filt, metric: v}
        for i, v in enumerate(values)
    ]


@pytest.mark.parametrize(
    "spec,values,why",
    [
        (MetricSpec("m", aggregation="mean"), [1.0, "yes"], "not a number"),
        (MetricSpec("m", aggregation="mean"), [1.0, math.nan], "nan"),
        (
            MetricSpec("m", aggregation="weighted_perplexity", higher_is_better=False),
            [1.0, 2.0],
            "not a (loglikelihood, weight)",
        ),
        (MetricSpec("m", aggregation="mean"), [[1, 2], [3, 4]], "not a number"),
    ],
)
def test_a_value_that_does_not_fit_its_rule_makes_the_metric_unscorable(spec, values, why):
    docs, (checked,) = extract_docs(_samples(values), [spec])
    assert docs == {} and checked.rule is None and why in checked.reason


def test_each_filter_reads_its_own_samples():
    samples = _samples([1.0, 0.0], "strict-match") + _samples([1.0, 1.0], "flexible-extract")
    specs = [MetricSpec("m", "strict-match"), MetricSpec("m", "flexible-extract")]
    docs, _ = extract_docs(samples, specs)
    assert docs["m,strict-match"]["num"] == [1.0, 0.0]
    assert docs["m,flexible-extract"]["num"] == [1.0, 1.0]
    assert docs["m,strict-match"]["keys"] == docs["m,flexible-extract"]["keys"] == ["d0", "d1"]


def test_a_corpus_metric_keeps_the_logged_items():
    spec = MetricSpec("bleu", aggregation="bleu")
    docs, _ = extract_docs(_samples([("the cat", "a cat"), ("dog", "dog")], metric="bleu"), [spec])
    assert docs["bleu,none"] == {
        "keys": ["d0", "d1"],
        "items": [["the cat", "a cat"], ["dog", "dog"]],
    }


def test_a_tasks_own_aggregation_function_is_loaded_from_its_config():
    from posgen.results.tables.metric_list import Aggregations

    def share(items):
        return 0.5

    class Manager:
        def task_config(self, name):
            if name != "mine":
                raise KeyError(f"{name!r} is not a single lm-eval task")
            return {"metric_list": [{"metric": "m", "aggregation": share}]}

    spec = MetricSpec("m", aggregation="function:share")
    aggregations = Aggregations(task_manager=Manager())
    assert aggregations.function("mine", spec) is share
    assert aggregations.function("other", spec) is None
    assert "(share) that posgen could not load" in aggregations.why("other", spec)
    registered = aggregations.function("other", MetricSpec("bleu", aggregation="bleu"))
    assert registered.__name__ == "bleu"  # a registered aggregation needs no config
