"""From lm-eval's output to posgen's tidy rows and per-document pairs.

lm-eval's ``simple_evaluate`` returns ``results[task]["<metric>,<filter>"]`` (and
``"<metric>_stderr,<filter>"``), ``configs[task]`` (the task's config, its
``metric_list`` among it), ``higher_is_better[task]`` and, with ``log_samples``,
``samples[task]``: one dict per (document, filter) holding the per-document metric
values. A cell record keeps the task's metrics as lm-eval ran them (``metric_list``: one
:class:`~posgen.results.folder.metrics.MetricSpec` per (metric, filter), those posgen
cannot score with their reason), each scorable metric's figure (``metrics``) and its
per-document values (``docs``: ``(num, den)`` pairs, or the items of a corpus metric), so
scores can be recomputed exactly on bootstrap resamples (:mod:`.documents`).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from posgen.results.folder.metrics import MetricSpec
from posgen.results.folder.schema import PERDOC_COLUMNS, RESULT_COLUMNS, SchemaError, frame
from posgen.results.tables.documents import by_filter, cell_metrics, doc_keys, extract_docs
from posgen.results.tables.length import length_tables as length_tables  # re-exported
from posgen.results.tables.metric_list import Aggregations, metric_specs
from posgen.results.tables.realised import (
    STATS,
    doc_examples,
    document_items,
    generation_examples,
    per_document,
    summary,
    text_items,
)


def specs_of(record: Mapping[str, Any]) -> list[MetricSpec]:
    """The (metric, filter) descriptions of a cell record, in the task's order."""
    return [MetricSpec.from_dict(d) for d in record.get("metric_list", [])]


def unscorable_text(specs: Iterable[MetricSpec]) -> str:
    """``bypass (none): lm-eval's bypass ...; ...`` for the specs posgen cannot score."""
    return "; ".join(f"{s.label}: {s.reason}" for s in specs if s.reason)


def result_rows(cells: Iterable[Mapping[str, Any]]):
    """The tidy ``results.parquet`` table of a list of cell records: one row per scored
    (metric, filter) of every cell."""
    rows = []
    for c in cells:
        info, cell = c["model_info"], c["cell"]
        for spec in specs_of(c):
            m = c["metrics"].get(spec.key)
            if m is None:
                continue  # not scorable in this cell: listed by unscorable_rows
            rows.append(
                {
                    **_cell_keys(c),
                    "model_path": info["model_path"],
                    "model_revision": info["model_revision"],
                    "dtype": info["dtype"],
                    "random_init": bool(info["random_init"]),
                    "lm_eval_task": cell["lm_eval_task"],
                    **_spec_columns(spec),
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


def _spec_columns(spec: MetricSpec) -> dict[str, Any]:
    return {
        "metric": spec.metric,
        "filter": spec.filter,
        "aggregation": spec.aggregation,
        "higher_is_better": bool(spec.higher_is_better),
    }


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


def baselines(cells: list[Mapping[str, Any]]) -> dict[tuple[str, str], Mapping[str, Any]]:
    """Each (model, task)'s baseline cell; a perturbed cell without one is refused."""
    base = {(c["model"], c["cell"]["task"]): c for c in cells if c["cell"]["kind"] == "none"}
    for c in cells:
        if (c["model"], c["cell"]["task"]) not in base:
            raise SchemaError(
                f"{c['model']} / {c['cell']['task']}: no baseline (rate 0) cell to "
                "pair with; rerun `posgen run` to finish the run"
            )
    return base


def paired_metrics(cells: list[Mapping[str, Any]]):
    """``(cell, spec, its slot, the baseline's slot)`` of every metric scorable in both a
    perturbed cell and its model's baseline cell."""
    base = baselines(cells)
    for c in cells:
        if c["cell"]["kind"] != "none":
            b = base[(c["model"], c["cell"]["task"])]
            for spec, slot, base_slot in _paired_specs(c, b):
                yield c, spec, slot, base_slot


def _paired_specs(c: Mapping[str, Any], b: Mapping[str, Any]):
    """``(spec, perturbed slot, baseline slot)`` of every metric scorable in both a
    perturbed cell and its baseline; refuses a metric described differently in the two."""
    base = {s.key: s for s in specs_of(b)}
    where = f"{c['model']} / {c['cell']['lm_eval_task']}"
    for spec in specs_of(c):
        other = base.get(spec.key)
        if other is None and spec.rule is not None:
            raise SchemaError(f"{where} / {spec.label}: the baseline cell has no such metric")
        if other is None or spec.rule is None or other.rule is None:
            continue  # unscorable on one side: listed by unscorable_rows
        if (other.aggregation, other.higher_is_better) != (spec.aggregation, spec.higher_is_better):
            raise SchemaError(
                f"{where} / {spec.label}: aggregated as {spec.aggregation} "
                f"(higher_is_better {spec.higher_is_better}), the baseline as "
                f"{other.aggregation} ({other.higher_is_better}); they cannot be compared"
            )
        if spec.key in c["docs"] and spec.key in b["docs"]:
            yield spec, c["docs"][spec.key], b["docs"][spec.key]


def perdoc_rows(cells: Iterable[Mapping[str, Any]]):
    """Per-document pairs of every perturbed cell with its model's baseline cell, for
    every metric scored per document (corpus metrics: :func:`corpus_pairs`)."""
    rows = []
    for c, spec, slot, base_slot in paired_metrics(list(cells)):
        if spec.per_document:
            rows.extend(_pair_rows(c, base_slot, slot, spec))
    worst: dict[tuple, float] = {}  # per document, the largest delta over the cell's seeds
    keys = ("model", "task", "kind", "scheme", "rate", "metric", "filter", "doc_key")
    for r in rows:
        key = tuple(r[k] for k in keys)
        worst[key] = max(worst.get(key, -math.inf), r["delta"])
    for r in rows:
        r["delta_worst"] = worst[tuple(r[k] for k in keys)]
    return frame(rows, PERDOC_COLUMNS)


def corpus_pairs(cells: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every perturbed cell's corpus metric with its baseline's, on the documents of both
    in key order: the cell's keys, the spec, ``keys``, ``base_items`` and ``items``."""
    out = []
    for c, spec, slot, base_slot in paired_metrics(list(cells)):
        if spec.rule != "corpus":
            continue
        mine = dict(zip(slot["keys"], slot["items"], strict=True))
        theirs = dict(zip(base_slot["keys"], base_slot["items"], strict=True))
        _same_documents(f"{c['model']} / {c['cell']['lm_eval_task']} / {spec.label}", theirs, mine)
        keys = sorted(mine)
        out.append(
            {
                **_cell_keys(c),
                "spec": spec,
                "keys": keys,
                "base_items": [theirs[k] for k in keys],
                "items": [mine[k] for k in keys],
            }
        )
    return out


def _same_documents(where: str, base: Iterable[str], mine: Iterable[str]) -> None:
    base, mine = set(base), set(mine)
    if base != mine:
        missing = sorted(base ^ mine)[:5]
        raise SchemaError(
            f"{where}: documents differ from the baseline's (e.g. {missing}); "
            "perturbed and baseline cells must score the same documents"
        )


def _pair_rows(
    c: Mapping[str, Any],
    base_slot: Mapping[str, list],
    slot: Mapping[str, list],
    spec: MetricSpec,
) -> list[dict[str, Any]]:
    where = f"{c['model']} / {c['cell']['lm_eval_task']} / {spec.label}"
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
    _same_documents(where, base, slot["keys"])
    per_doc = per_document(c["realised"])
    sign = spec.ratio_sign()
    rows = []
    for key, num, den, choice in zip(slot["keys"], slot["num"], slot["den"], choices, strict=True):
        bn, bd = base[key]
        item = per_doc.get(key, {})
        rows.append(
            {
                **_cell_keys(c),
                **_spec_columns(spec),
                "doc_key": key,
                "base_num": bn,
                "base_den": bd,
                "num": num,
                "den": den,
                # > 0 is worse: the NLL rise per word, byte or document for the log
                # rules, the score's move in its worse direction for means
                "delta": sign * (bn / bd - num / den),
                "base_choice": int(base_choice[key]),
                "choice": int(choice),
                "realised_n": float(item.get("n", math.nan)),
                **{f"realised_{k}": float(item.get(k, math.nan)) for k in STATS},
            }
        )
    return rows


def unscorable_rows(cells: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Every (model, task, metric, filter) posgen could not score in some cell, with the
    reason and how many cells it was unscorable in (the report and the commands list them)."""
    found: dict[tuple[str, str, str], dict[str, Any]] = {}
    for c in cells:
        for spec in specs_of(c):
            if spec.reason:
                key = (c["model"], c["cell"]["task"], spec.label)
                row = found.setdefault(
                    key,
                    {
                        "model": key[0],
                        "task": key[1],
                        "metric": key[2],
                        "reason": spec.reason,
                        "cells": 0,
                    },
                )
                row["cells"] += 1
    return [found[k] for k in sorted(found)]


def task_metrics(cells: Iterable[Mapping[str, Any]]) -> dict[str, list[MetricSpec]]:
    """Each task's (metric, filter) descriptions in its own order, from its first
    baseline cell (every model runs the same task config)."""
    out: dict[str, list[MetricSpec]] = {}
    for c in cells:
        if c["cell"]["kind"] == "none":
            out.setdefault(c["cell"]["task"], specs_of(c))
    return out


def cell_record(
    cell: Mapping[str, Any],
    model_info: Mapping[str, Any],
    results: Mapping[str, Any],
    samples: Mapping[str, list],
    posgen_version: str,
    seed: int = 0,
    model_side: Mapping[str, Any] | None = None,
    configs: Mapping[str, Any] | None = None,
    higher_is_better: Mapping[str, Any] | None = None,
    aggregations: Aggregations | None = None,
) -> dict[str, Any]:
    """The record of one finished cell from lm-eval's output for its single task.

    ``cell`` holds task, lm_eval_task, kind, scheme, rate, seed, perturbation_spec and
    perturbation_version; ``results``, ``samples``, ``configs`` and ``higher_is_better``
    are those of ``simple_evaluate``'s output (or an lm-eval results file; without
    ``configs`` lm-eval's registry defaults describe the metrics). ``model_side``
    (position and feature cells): ``{"realised": ..., "rows": [...]}`` as measured in the
    model (posgen.harness.run.realised_rows); text cells take theirs from the logged docs.
    ``aggregations`` loads a corpus metric's function (a task's own from its config).
    Refuses a task none of whose metrics posgen can score.
    """
    name = cell["lm_eval_task"]
    _require_logged(name, results, samples)
    split = cell.get("split") or "test"
    config = (configs or {}).get(name)
    specs = metric_specs(results[name], samples[name], config, (higher_is_better or {}).get(name))
    docs, specs = extract_docs(samples[name], specs, split)
    specs, functions = corpus_functions(cell["task"], specs, aggregations or Aggregations())
    docs = {k: v for k, v in docs.items() if k in functions or not v.get("items")}
    metrics = cell_metrics(docs, specs, results[name], seed, functions)
    if not metrics:
        raise SchemaError(
            f"{name}: posgen can score none of its metrics ({unscorable_text(specs) or 'none logged'})"
        )
    record = realised_record(cell["kind"], name, samples[name], split, model_side)
    if _generative(config, samples[name]):
        record["examples"]["generations"] = _generations(samples[name], split)
    return {
        "cell": dict(cell),
        "model_info": dict(model_info),
        "posgen_version": posgen_version,
        "metric_list": [s.to_dict() for s in specs],
        "metrics": metrics,
        "docs": docs,
        **record,
    }


def _require_logged(name: str, results: Mapping[str, Any], samples: Mapping[str, list]) -> None:
    """Refuses an lm-eval task with no results or no logged samples."""
    if name not in results or name not in samples:
        raise SchemaError(
            f"lm-eval returned no results or samples for {name!r} "
            f"(got {sorted(results)}); was log_samples on?"
        )


def _generations(samples: list[Mapping[str, Any]], split: str) -> dict[str, dict[str, Any]]:
    """A generative task's examples: what the model was asked and answered, per filter."""
    groups = by_filter(samples)
    first = next(iter(groups.values()))
    return generation_examples(groups, doc_keys(first, split))


def corpus_functions(
    task: str, specs: list[MetricSpec], aggregations: Aggregations
) -> tuple[list[MetricSpec], dict[str, Any]]:
    """Each scorable corpus metric's aggregation function, by key; a metric whose function
    cannot be loaded becomes unscorable, saying why."""
    out, functions = [], {}
    for spec in specs:
        if spec.rule == "corpus":
            fn = aggregations.function(task, spec)
            if fn is None:
                spec = spec.with_problem(aggregations.why(task, spec))
            else:
                functions[spec.key] = fn
        out.append(spec)
    return out, functions


def _generative(config: Mapping[str, Any] | None, samples: list[Mapping[str, Any]]) -> bool:
    """A generate_until task: said by its config, else by its requests' arguments
    (a context and its generation settings)."""
    if config and config.get("output_type"):
        return config["output_type"] == "generate_until"
    args = samples[0].get("arguments") if samples else None
    return isinstance(args, list) and bool(args) and isinstance(args[0][-1], Mapping)


def realised_record(
    kind: str,
    task: str,
    samples: list[Mapping[str, Any]],
    split: str,
    model_side: Mapping[str, Any] | None,
) -> dict[str, Any]:
    """A record's ``realised`` amount and ``examples`` (see posgen.results.tables.realised);
    ``task``: the lm-eval task the ``samples`` were logged under (one filter's samples are
    read: the documents are the same under every filter). A model-side cell's rows are
    traced to their documents (lm-eval's ``doc_id``) and summed up per document."""

    samples = next(iter(by_filter(samples).values()), [])
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
