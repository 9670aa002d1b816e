"""From lm-eval's output to posgen's tidy rows and per-document pairs.

lm-eval's ``simple_evaluate`` returns ``results[task]["<metric>,<filter>"]`` (and
``"<metric>_stderr,<filter>"``) and, with ``log_samples``, ``samples[task]``: one dict
per document holding the per-document metric values. For a perplexity metric that value
is the pair ``(loglikelihood, weight)`` (weight = words or bytes) that lm-eval's
``weighted_perplexity`` aggregates as ``exp(-sum(ll) / sum(weight))``; for ``acc`` it is
a 0/1 score that lm-eval averages. posgen keeps those pairs as ``(num, den)`` per
document so scores can be recomputed exactly on bootstrap resamples.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import numpy as np

from posgen.results.folder.schema import (
    LENGTH_CURVE_COLUMNS,
    LENGTH_EFFECTIVE_COLUMNS,
    METRIC_RULES,
    PERDOC_COLUMNS,
    RESULT_COLUMNS,
    SchemaError,
    frame,
)
from posgen.results.folder.store import read_json
from posgen.results.stats.resampling import resample_counts
from posgen.results.tables.realised import STATS, doc_examples, document_items, summary, text_items
from posgen.tasks.doc_ids import DOC_ID, source_ids

# How a logged document is paired across cells: perturbed tasks add DOC_ID (the source
# id of the document they perturbed); an unperturbed document gets the same id by the
# same rule (posgen.tasks.doc_ids).
PERTURBED_ID = DOC_ID
STDERR_BOOTSTRAP = 500


def doc_keys(samples: list[Mapping[str, Any]], split: str) -> list[str]:
    """The pairing key of every logged sample of one cell (:mod:`posgen.tasks.doc_ids`)."""
    docs = [s.get("doc") if isinstance(s.get("doc"), Mapping) else {} for s in samples]
    if docs and all(d.get(PERTURBED_ID) is not None for d in docs):
        return [str(d[PERTURBED_ID]) for d in docs]
    ids = source_ids(docs, split)
    if ids is not None:
        return ids
    if any("doc_id" not in s for s in samples):
        raise SchemaError("a logged sample has neither a source doc id nor lm-eval's doc_id")
    return [f"{split}:{s['doc_id']}" for s in samples]


def extract_docs(samples: Iterable[Mapping[str, Any]], split: str = "test") -> dict[str, dict]:
    """Per metric: ``{"keys": [...], "num": [...], "den": [...], "excluded": [...]}`` from
    logged samples; ``split`` is the split lm-eval evaluated (for documents without an id
    field). A document with no words or no bytes (lm-eval logs ``[0, 0]``) has no
    perplexity ratio: it is left out of ``keys``/``num``/``den`` and its key listed in
    ``excluded`` (it adds nothing to lm-eval's sums either). So is an empty document in
    word perplexity, which lm-eval counts as one word (``len(re.split(r"\\s+", ""))`` is 1)
    of loglikelihood 0: no bytes, or a ``[0.0, 1]`` pair; ``excluded_sum`` keeps what
    lm-eval summed for the excluded documents, so its reported value is still checked."""
    samples = list(samples)
    keys = doc_keys(samples, split)
    out: dict[str, dict[str, list]] = {}
    for key, sample in zip(keys, samples, strict=True):
        for metric, rule in METRIC_RULES.items():
            if metric not in sample:
                continue
            num, den = _num_den(sample[metric], rule, metric)
            slot = out.setdefault(metric, {"keys": [], "num": [], "den": [], "excluded": []})
            if rule == "perplexity" and (den == 0 or _empty_words(sample, metric, num, den)):
                slot["excluded"].append(key)
                # what lm-eval summed for it anyway, to check its reported value
                ex = slot.setdefault("excluded_sum", [0.0, 0.0])
                ex[0], ex[1] = ex[0] + num, ex[1] + den
                continue
            slot["keys"].append(key)
            slot["num"].append(num)
            slot["den"].append(den)
            if metric == "acc":  # the predicted choice, for the consistency rate
                slot.setdefault("choice", []).append(predicted_choice(sample))
    if len(set(keys)) != len(keys):
        raise SchemaError(
            "duplicate document keys in the logged samples; documents cannot be paired"
        )
    return out


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


def _num_den(value: Any, rule: str, metric: str) -> tuple[float, float]:
    if rule == "perplexity":
        if not isinstance(value, (list, tuple)) or len(value) != 2:
            raise SchemaError(
                f"{metric}: expected a (loglikelihood, weight) pair per document, got {value!r}"
            )
        return float(value[0]), float(value[1])
    return float(value), 1.0


def aggregate(rule: str, num: np.ndarray, den: np.ndarray) -> np.ndarray:
    """lm-eval's aggregation over the last axis.

    perplexity: ``exp(-sum(num) / sum(den))`` (lm_eval.api.metrics.weighted_perplexity);
    mean: ``sum(num) / sum(den)`` (den = 1 per document). Shapes: ``[..., n_docs]`` ->
    ``[...]``.
    """
    ratio = num.sum(axis=-1) / den.sum(axis=-1)
    return np.exp(-ratio) if rule == "perplexity" else ratio


def metric_stderr(rule: str, num: np.ndarray, den: np.ndarray, seed: int = 0) -> float:
    """Standard error of the aggregate: closed form for means (as lm-eval's
    ``mean_stderr``), a seeded bootstrap over documents for perplexities."""
    n = len(num)
    if n < 2:
        return math.nan
    if rule == "mean":
        return float(np.std(num / den, ddof=1) / math.sqrt(n))

    counts = resample_counts(n, STDERR_BOOTSTRAP, seed, "metric-stderr")
    return float(np.std(aggregate(rule, counts * num, counts * den), ddof=1))


def cell_metrics(
    docs: Mapping[str, Mapping[str, list]], reported: Mapping[str, Any], seed: int = 0
) -> dict[str, dict[str, float]]:
    """Per metric: value (recomputed from the documents and checked against lm-eval's),
    stderr and n."""
    out = {}
    for metric, slot in docs.items():
        rule = METRIC_RULES[metric]
        num, den = np.asarray(slot["num"]), np.asarray(slot["den"])
        if len(num) == 0:  # every document excluded: nothing to score
            continue
        value = float(aggregate(rule, num, den))
        lm_value = reported.get(f"{metric},none")
        ex_num, ex_den = slot.get("excluded_sum", (0.0, 0.0))  # what lm-eval also summed
        as_lm_eval = float(aggregate(rule, np.append(num, ex_num), np.append(den, ex_den)))
        if isinstance(lm_value, (int, float)) and not math.isclose(
            as_lm_eval, lm_value, rel_tol=1e-6, abs_tol=1e-9
        ):
            raise SchemaError(
                f"{metric}: lm-eval reported {lm_value}, the logged documents "
                f"give {as_lm_eval}; the samples do not match the results"
            )
        lm_se = reported.get(f"{metric}_stderr,none")
        stderr = (
            float(lm_se) if isinstance(lm_se, (int, float)) else metric_stderr(rule, num, den, seed)
        )
        out[metric] = {
            "value": value,
            "stderr": stderr,
            "n": len(num),
            "excluded": len(slot.get("excluded", [])),
        }
    return out


def result_rows(cells: Iterable[Mapping[str, Any]]):
    """The tidy ``results.parquet`` table of a list of cell records."""
    rows = []
    for c in cells:
        info, cell = c["model_info"], c["cell"]
        for metric, m in sorted(c["metrics"].items()):
            rows.append(
                {
                    **_cell_keys(c),
                    "model_path": info["model_path"],
                    "model_revision": info["model_revision"],
                    "dtype": info["dtype"],
                    "random_init": bool(info["random_init"]),
                    "lm_eval_task": cell["lm_eval_task"],
                    "metric": metric,
                    "value": m["value"],
                    "stderr": math.nan if m["stderr"] is None else m["stderr"],
                    "n": int(m["n"]),
                    "posgen_version": c["posgen_version"],
                    "perturbation_spec": cell["perturbation_spec"],
                    "perturbation_version": int(cell["perturbation_version"]),
                    **summary(c["realised"]),
                }
            )
    return frame(rows, RESULT_COLUMNS)


def _cell_keys(c: Mapping[str, Any]) -> dict[str, Any]:
    cell = c["cell"]
    return {
        "model": c["model"],
        "task": cell["task"],
        "kind": cell["kind"],
        "scheme": cell["scheme"],
        "rate": float(cell["rate"]),
        "seed": int(cell["seed"]),
    }


def perdoc_rows(cells: Iterable[Mapping[str, Any]]):
    """Per-document pairs of every perturbed cell with its model's baseline cell."""
    cells = list(cells)
    base = {(c["model"], c["cell"]["task"]): c for c in cells if c["cell"]["kind"] == "none"}
    rows = []
    for c in cells:
        cell = c["cell"]
        if cell["kind"] == "none":
            continue
        b = base.get((c["model"], cell["task"]))
        if b is None:
            raise SchemaError(
                f"{c['model']} / {cell['task']}: no baseline (rate 0) cell to "
                "pair with; rerun `posgen run` to finish the run"
            )
        for metric, slot in c["docs"].items():
            rows.extend(_pair_rows(c, b["docs"].get(metric), slot, metric))
    worst: dict[tuple, float] = {}  # per document, the largest delta over the cell's seeds
    for r in rows:
        key = (r["model"], r["task"], r["kind"], r["scheme"], r["rate"], r["metric"], r["doc_key"])
        worst[key] = max(worst.get(key, -math.inf), r["delta"])
    for r in rows:
        key = (r["model"], r["task"], r["kind"], r["scheme"], r["rate"], r["metric"], r["doc_key"])
        r["delta_worst"] = worst[key]
    return frame(rows, PERDOC_COLUMNS)


def _pair_rows(
    c: Mapping[str, Any],
    base_slot: Mapping[str, list] | None,
    slot: Mapping[str, list],
    metric: str,
) -> list[dict[str, Any]]:
    cell = c["cell"]
    where = f"{c['model']} / {cell['lm_eval_task']} / {metric}"
    if base_slot is None:
        raise SchemaError(f"{where}: the baseline cell has no such metric")
    base = {
        k: (n, d)
        for k, n, d in zip(base_slot["keys"], base_slot["num"], base_slot["den"], strict=True)
    }
    # a document excluded on either side (no words or bytes) is paired on neither
    dropped = set(base_slot.get("excluded", [])) | set(slot.get("excluded", []))
    base = {k: v for k, v in base.items() if k not in dropped}
    kept = [i for i, k in enumerate(slot["keys"]) if k not in dropped]
    slot = {f: [slot[f][i] for i in kept] for f in ("keys", "num", "den", "choice") if f in slot}
    no_choice = [-1] * len(base_slot["keys"])
    base_choice = dict(zip(base_slot["keys"], base_slot.get("choice", no_choice), strict=True))
    choices = slot.get("choice", [-1] * len(slot["keys"]))
    if set(base) != set(slot["keys"]):
        missing = sorted(set(base) ^ set(slot["keys"]))[:5]
        raise SchemaError(
            f"{where}: documents differ from the baseline's (e.g. {missing}); "
            "perturbed and baseline cells must score the same documents"
        )
    realised = c["realised"]
    per_doc = {
        i["key"]: i
        for i in (
            realised["items"] if realised["unit"] == "document" else realised.get("documents", [])
        )
    }
    rows = []
    for key, num, den, choice in zip(slot["keys"], slot["num"], slot["den"], choices, strict=True):
        bn, bd = base[key]
        item = per_doc.get(key, {})
        # > 0 means worse: for perplexities num/den = -NLL per word (byte), so this is the
        # NLL increase; for scores it is the drop
        delta = bn / bd - num / den
        rows.append(
            {
                **_cell_keys(c),
                "metric": metric,
                "doc_key": key,
                "base_num": bn,
                "base_den": bd,
                "num": num,
                "den": den,
                "delta": delta,
                "base_choice": int(base_choice[key]),
                "choice": int(choice),
                "realised_n": float(item.get("n", math.nan)),
                **{f"realised_{k}": float(item.get(k, math.nan)) for k in STATS},
            }
        )
    return rows


def cell_record(
    cell: Mapping[str, Any],
    model_info: Mapping[str, Any],
    results: Mapping[str, Any],
    samples: Mapping[str, list],
    posgen_version: str,
    seed: int = 0,
    model_side: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The record of one finished cell from lm-eval's output for its single task.

    ``cell`` holds task, lm_eval_task, kind, scheme, rate, seed, perturbation_spec and
    perturbation_version; ``results``/``samples`` are ``simple_evaluate``'s
    ``["results"]`` and ``["samples"]``. ``model_side`` (position and feature cells):
    ``{"realised": ..., "rows": [...]}`` as measured in the model
    (posgen.harness.run.realised_rows); text cells take theirs from the logged docs.
    """
    name = cell["lm_eval_task"]
    if name not in results or name not in samples:
        raise SchemaError(
            f"lm-eval returned no results or samples for {name!r} "
            f"(got {sorted(results)}); was log_samples on?"
        )
    split = cell.get("split") or "test"
    docs = extract_docs(samples[name], split)
    if not docs:
        raise SchemaError(
            f"{name}: the logged samples carry none of the metrics posgen "
            f"scores ({sorted(METRIC_RULES)})"
        )
    return {
        "cell": dict(cell),
        "model_info": dict(model_info),
        "posgen_version": posgen_version,
        "metrics": cell_metrics(docs, results[name], seed),
        "docs": docs,
        **realised_record(cell["kind"], name, samples[name], split, model_side),
    }


def realised_record(
    kind: str,
    task: str,
    samples: list[Mapping[str, Any]],
    split: str,
    model_side: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """A record's ``realised`` amount and ``examples`` (see posgen.results.tables.realised);
    ``task``: the lm-eval task the ``samples`` were logged under. A model-side cell's rows
    are traced to their documents (lm-eval's ``doc_id``) and summed up per document."""

    keys = doc_keys(samples, split)
    examples: dict[str, Any] = {"docs": doc_examples(samples, keys)}
    realised: dict[str, Any] = {"unit": "", "items": []}
    if kind == "text":
        realised = {"unit": "document", "items": text_items(samples, keys)}
    elif kind != "none" and model_side is not None:
        key_of = {(task, int(s["doc_id"])): key for s, key in zip(samples, keys, strict=True)}
        rows, documents = document_items(model_side["realised"]["items"], key_of, task)
        realised = {**model_side["realised"], "items": rows, "documents": documents}
        examples["rows"] = list(model_side.get("rows", []))
    return {"realised": dict(realised), "examples": examples}


def length_tables(run_root: Any) -> dict[str, Any]:
    """The tidy length tables of ``posgen run --length`` (``length_effective`` and
    ``length_curves``, schema.LENGTH_*_COLUMNS) from every ``RUN/length/<model>/
    length_scores.json``; empty dict when the run has no length folder."""
    effective, curves = [], []
    for path in sorted(Path(run_root).glob("length/*/length_scores.json")):
        scores = read_json(path, "length scores")
        model, config = path.parent.name, scores["config"]
        for scheme, eff in scores["effective"].items():
            effective.append(
                {
                    "model": model,
                    "scheme": scheme,
                    "trained_context": int(config["trained_context"]),
                    "max_length": int(config["max_length"]),
                    **{k: eff[k] for k in LENGTH_EFFECTIVE_COLUMNS if k in eff},
                }
            )
        curves += [{"model": model, **row} for row in scores["curves"]]
    if not effective:
        return {}
    return {
        "length_effective": frame(effective, LENGTH_EFFECTIVE_COLUMNS),
        "length_curves": frame(curves, LENGTH_CURVE_COLUMNS),
    }
