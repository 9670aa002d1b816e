"""A cell's per-document values, read from lm-eval's logged samples, and its figures.

lm-eval logs one sample per (document, filter): ``sample["filter"]`` names the filter and
``sample[<metric>]`` holds the metric's per-document value under it. posgen keeps, per
(metric, filter) (:class:`~posgen.results.folder.metrics.MetricSpec`, keyed
``"<metric>,<filter>"``):

- per-document rules, as ``(num, den)`` so scores can be recomputed exactly on resamples:
  ``weighted_perplexity`` and ``bits_per_byte`` log ``(loglikelihood, weight)`` (weight =
  words or bytes); ``perplexity`` logs the loglikelihood (``den = 1``); ``mean`` logs a
  number (``den = 1``);
- the ``corpus`` rule: the per-document item lm-eval logged (``[reference, prediction]``
  for bleu/chrf/ter, ``[gold, prediction]`` for mcc/f1), aggregated over the whole set by
  the metric's own function (lm-eval's registered one, or the task's:
  :class:`posgen.results.tables.metric_list.Aggregations`).

A value of another shape than its rule needs makes that metric unscorable in the cell
(its spec says why), never the cell.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from typing import Any

import numpy as np

from posgen.results.folder.metrics import MetricSpec
from posgen.results.folder.schema import SchemaError
from posgen.results.stats.resampling import resample_counts
from posgen.tasks.doc_ids import DOC_ID, source_ids

# How a logged document is paired across cells: perturbed tasks add DOC_ID (the source
# id of the document they perturbed); an unperturbed document gets the same id by the
# same rule (posgen.tasks.doc_ids).
PERTURBED_ID = DOC_ID
STDERR_BOOTSTRAP = 500
CORPUS_STDERR_BOOTSTRAP = 100  # lm-eval's own cap for its corpus metrics (bleu, chrf, ter)


def doc_keys(samples: list[Mapping[str, Any]], split: str) -> list[str]:
    """The pairing key of every logged sample of one cell and filter
    (:mod:`posgen.tasks.doc_ids`)."""
    docs = [s.get("doc") if isinstance(s.get("doc"), Mapping) else {} for s in samples]
    if docs and all(d.get(PERTURBED_ID) is not None for d in docs):
        return [str(d[PERTURBED_ID]) for d in docs]
    ids = source_ids(docs, split)
    if ids is not None:
        return ids
    if any("doc_id" not in s for s in samples):
        raise SchemaError("a logged sample has neither a source doc id nor lm-eval's doc_id")
    return [f"{split}:{s['doc_id']}" for s in samples]


def by_filter(samples: Iterable[Mapping[str, Any]]) -> dict[str, list[Mapping[str, Any]]]:
    """The logged samples per filter, in lm-eval's order (one sample per document each)."""
    out: dict[str, list[Mapping[str, Any]]] = {}
    for s in samples:
        out.setdefault(str(s.get("filter", "none")), []).append(s)
    return out


def extract_docs(
    samples: Iterable[Mapping[str, Any]], specs: list[MetricSpec], split: str = "test"
) -> tuple[dict[str, dict], list[MetricSpec]]:
    """Per scorable spec: its slot (``keys``, ``num``, ``den``, ``excluded`` for the
    per-document rules, ``keys`` and ``items`` for corpus ones); and the specs, those whose
    logged values do not fit their rule marked unscorable. ``split``: the split lm-eval
    evaluated (for documents without an id field).

    A document with no words or no bytes (lm-eval logs ``[0, 0]``) has no perplexity
    ratio: it is left out of ``keys``/``num``/``den`` and its key listed in ``excluded``.
    So is an empty document in word perplexity, which lm-eval counts as one word
    (``len(re.split(r"\\s+", ""))`` is 1) of loglikelihood 0: no bytes, or a ``[0.0, 1]``
    pair; ``excluded_sum`` keeps what lm-eval summed for them, so its figure is checked."""
    groups = by_filter(samples)
    out: dict[str, dict] = {}
    checked = []
    for spec in specs:
        rows = groups.get(spec.filter, [])
        if spec.rule is not None:
            keys = doc_keys(rows, split)
            if len(set(keys)) != len(keys):
                raise SchemaError(
                    "duplicate document keys in the logged samples; documents cannot be paired"
                )
            try:
                out[spec.key] = _slot(spec, keys, rows)
            except _Unfit as e:
                spec = spec.with_problem(str(e))
        checked.append(spec)
    return out, checked


class _Unfit(ValueError):
    """A logged value does not fit its metric's rule."""


def _slot(spec: MetricSpec, keys: list[str], rows: list[Mapping[str, Any]]) -> dict[str, Any]:
    have = [(k, s) for k, s in zip(keys, rows, strict=True) if spec.metric in s]
    if not have:
        raise _Unfit("the logged samples carry no per-document value of it")
    if spec.rule == "corpus":
        return {"keys": [k for k, _ in have], "items": [_plain(s[spec.metric]) for _, s in have]}
    slot: dict[str, Any] = {"keys": [], "num": [], "den": [], "excluded": []}
    for key, sample in have:
        num, den = _num_den(sample[spec.metric], spec)
        if spec.log_scale and (den == 0 or _empty_words(sample, spec.metric, num, den)):
            slot["excluded"].append(key)
            ex = slot.setdefault("excluded_sum", [0.0, 0.0])  # what lm-eval summed anyway
            ex[0], ex[1] = ex[0] + num, ex[1] + den
            continue
        slot["keys"].append(key)
        slot["num"].append(num)
        slot["den"].append(den)
        if spec.metric == "acc":  # the choice lm-eval's acc picked, for the consistency rate
            slot.setdefault("choice", []).append(predicted_choice(sample))
    return slot


def _plain(value: Any) -> Any:
    """A logged item as JSON keeps it (tuples as lists, numpy scalars as Python ones)."""
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    if isinstance(value, np.ndarray):
        return value.tolist()
    if isinstance(value, np.generic):
        return value.item()
    return value


def _num_den(value: Any, spec: MetricSpec) -> tuple[float, float]:
    if spec.aggregation in ("weighted_perplexity", "bits_per_byte"):
        if not (isinstance(value, (list, tuple)) and len(value) == 2):
            raise _Unfit(f"a per-document value is {value!r:.60}, not a (loglikelihood, weight)")
        pair = (_number(value[0]), _number(value[1]))
        if pair[1] < 0:
            raise _Unfit(f"a per-document weight is {pair[1]!r}, below 0")
        return pair
    return _number(value), 1.0


def _number(value: Any) -> float:
    if isinstance(value, (list, tuple, str, dict)) or value is None:
        raise _Unfit(f"a per-document value is {value!r:.60}, not a number")
    try:
        x = float(value)
    except (TypeError, ValueError):
        raise _Unfit(f"a per-document value is {value!r:.60}, not a number") from None
    if not math.isfinite(x):
        raise _Unfit(f"a per-document value is {x!r}")
    return x


def _empty_words(sample: Mapping[str, Any], metric: str, num: float, den: float) -> bool:
    """An empty document lm-eval logged as one word: no bytes, or loglikelihood 0."""
    if metric != "word_perplexity" or den != 1:
        return False
    nbytes = sample.get("byte_perplexity")
    if isinstance(nbytes, (list, tuple)) and len(nbytes) == 2:
        return float(nbytes[1]) == 0
    return num == 0


def predicted_choice(sample: Mapping[str, Any]) -> int:
    """The choice lm-eval's ``acc`` picked: the argmax of the per-choice loglikelihoods
    in ``filtered_resps`` (``[(ll, is_greedy), ...]``); -1 when they are not logged, or
    when there is one continuation only (a cloze ``acc`` is ``is_greedy`` of the target:
    there is no choice to keep, and its argmax would always be 0)."""
    resps = sample.get("filtered_resps")
    try:
        lls = [float(r[0]) for r in resps]  # type: ignore[union-attr]
    except (TypeError, ValueError, IndexError, KeyError):
        return -1
    return int(np.argmax(lls)) if len(lls) > 1 else -1


def aggregate(rule: str, num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """lm-eval's aggregation of a per-document rule over the last axis.

    ``perplexity``: ``exp(-Σ num / Σ den)`` (lm-eval's ``weighted_perplexity``, and its
    ``perplexity`` with ``den = 1``); ``bits_per_byte``: ``-Σ num / Σ den / ln 2``;
    ``mean``: ``Σ num / Σ den`` (den = 1 per document). Shapes ``[..., n]`` -> ``[...]``.
    """
    ratio = num.sum(axis=-1) / den.sum(axis=-1)
    if rule == "perplexity":
        return np.exp(-ratio)
    return -ratio / math.log(2) if rule == "bits_per_byte" else ratio


def corpus_value(fn: Callable[[list[Any]], Any], items: list[Any]) -> float:
    """A corpus metric's figure: its aggregation function ``fn`` (lm-eval's registered
    one, or the task's own) over ``items``."""
    return float(fn(items))


def corpus_replicates(
    fn: Callable[[list[Any]], Any], items: list[Any], counts: np.ndarray
) -> np.ndarray:
    """The corpus figure on each bootstrap resample: ``counts`` ``[B, n]`` says how often
    each item is drawn (:func:`posgen.results.stats.resampling.resample_counts`) -> ``[B]``."""
    index = np.arange(len(items))
    return np.array([corpus_value(fn, [items[i] for i in np.repeat(index, row)]) for row in counts])


def metric_stderr(
    spec: MetricSpec, slot: Mapping[str, Any], seed: int = 0, fn: Callable | None = None
) -> float:
    """Standard error of a cell's figure: closed form for means (as lm-eval's
    ``mean_stderr``), a seeded bootstrap over documents otherwise (``fn``: a corpus
    metric's aggregation function)."""
    n = len(slot["keys"])
    if n < 2:
        return math.nan
    if spec.rule == "corpus":
        counts = resample_counts(n, CORPUS_STDERR_BOOTSTRAP, seed, f"metric-stderr|{spec.key}")
        return float(np.std(corpus_replicates(fn, slot["items"], counts), ddof=1))
    num, den = np.asarray(slot["num"]), np.asarray(slot["den"])
    if spec.rule == "mean":
        return float(np.std(num / den, ddof=1) / math.sqrt(n))
    counts = resample_counts(n, STDERR_BOOTSTRAP, seed, "metric-stderr")
    return float(np.std(aggregate(spec.rule, counts * num, counts * den), ddof=1))


def cell_metrics(
    docs: Mapping[str, Mapping[str, Any]],
    specs: list[MetricSpec],
    reported: Mapping[str, Any],
    seed: int = 0,
    functions: Mapping[str, Callable] | None = None,
) -> dict[str, dict[str, float]]:
    """Per scorable (metric, filter) with documents: value (recomputed from the documents
    and checked against lm-eval's), stderr (lm-eval's when it gave one) and n;
    ``functions``: each corpus metric's aggregation function, by its key."""
    out = {}
    for spec in specs:
        slot = docs.get(spec.key)
        if spec.rule is None or slot is None or not slot["keys"]:
            continue  # unscorable, or every document excluded: nothing to score
        fn = (functions or {}).get(spec.key)
        value, as_lm_eval = _values(spec, slot, fn)
        lm_value = reported.get(spec.key)
        if isinstance(lm_value, (int, float)) and not _same(as_lm_eval, lm_value):
            raise SchemaError(
                f"{spec.key}: lm-eval reported {lm_value}, the logged documents "
                f"give {as_lm_eval}; the samples do not match the results"
            )
        lm_se = reported.get(f"{spec.metric}_stderr,{spec.filter}")
        stderr = lm_se if isinstance(lm_se, (int, float)) else metric_stderr(spec, slot, seed, fn)
        out[spec.key] = {
            "value": value,
            "stderr": float(stderr),
            "n": len(slot["keys"]),
            "excluded": len(slot.get("excluded", [])),
        }
    return out


def _values(spec: MetricSpec, slot: Mapping[str, Any], fn: Callable | None) -> tuple[float, float]:
    """The figure on the kept documents, and as lm-eval computed it (excluded ones too)."""
    if spec.rule == "corpus":
        value = corpus_value(fn, slot["items"])
        return value, value
    num, den = np.asarray(slot["num"]), np.asarray(slot["den"])
    ex_num, ex_den = slot.get("excluded_sum", (0.0, 0.0))
    value = float(aggregate(spec.rule, num, den))
    return value, float(aggregate(spec.rule, np.append(num, ex_num), np.append(den, ex_den)))


def _same(a: float, b: float) -> bool:
    if math.isnan(a) or math.isnan(b):
        return math.isnan(a) and math.isnan(b)
    return math.isclose(a, b, rel_tol=1e-6, abs_tol=1e-9)
