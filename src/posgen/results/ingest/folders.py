"""``posgen ingest``: a posgen run folder from lm-eval output folders.

Any lm-eval model run with ``--log_samples`` can be scored by posgen: ``hf-posgen``
(position and feature cells, under ``accelerate launch`` or not), and plain ``hf``,
``vllm`` or API models on posgen's perturbed text tasks. Each evaluated task becomes one
cell record (:func:`posgen.results.tables.tidy.cell_record`, as ``posgen run`` writes them), then
the run folder gets the same tables, scores and report as ``posgen run``'s.

Refused with a message, before anything is written: a perturbed cell without its
baseline (the same model and task unperturbed), perturbation seeds that differ, a cell
given twice, a model whose cells were run with different settings that change what is
scored (:mod:`posgen.results.ingest.scored_settings`: dtype, max_length, revision, the
model's path and content, tokenizer and BOS, few-shot examples, chat template, system
instruction, generation arguments, the task's definition, ...), documents that differ
between a cell and its baseline, a task whose samples were not logged, and an ``hf-posgen`` output run
with ``layers=``, ``heads=``, ``logits=`` or ``length=`` (no run folder cell holds them).
"""

from __future__ import annotations

import importlib.metadata
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from posgen import __version__
from posgen.perturbations.seeding import DEFAULT_SEED
from posgen.results.folder.config import Decompose, ModelEntry, RunConfig, Scoring, SweepAxis
from posgen.results.folder.labels import short_labels
from posgen.results.folder.run_store import RunStore
from posgen.results.folder.schema import SCHEMA_VERSION, SchemaError, rate_label
from posgen.results.ingest.lm_eval_output import (
    EvaluatedTask,
    evaluated_tasks,
    model_args,
    model_side,
    perturbation_value,
    results_files,
    text_side,
)
from posgen.results.ingest.scored_settings import check_scored_settings
from posgen.results.report.build import regenerate
from posgen.results.tables.metric_list import Aggregations
from posgen.results.tables.tidy import cell_record, perdoc_rows

RAW_KEYS = ("results", "configs", "versions", "n-shot", "higher_is_better", "n-samples", "config")


def model_label(ev: EvaluatedTask) -> str:
    """The model a cell belongs to: ``pretrained=`` (``hf``, ``hf-posgen``, ``vllm``),
    else ``model=`` (API models), else lm-eval's ``model_name``."""
    args = model_args(ev.config)
    label = args.get("pretrained") or args.get("model") or ev.results.get("model_name")
    if not label:
        raise SchemaError(f"{ev.where}: the results do not say which model ran")
    return str(label)


def model_dtype(ev: EvaluatedTask) -> str:
    dtype = model_args(ev.config).get("dtype") or ev.config.get("model_dtype") or "auto"
    return str(dtype).removeprefix("torch.")


def cell_of(ev: EvaluatedTask) -> dict[str, Any]:
    """The cell description of one evaluated task (seed None for a baseline)."""
    task, text, text_seed = text_side(ev)
    inside = model_side(ev)
    if text is not None and inside is not None:
        raise SchemaError(
            f"{ev.where}: a perturbed text task run under hf-posgen's {inside[0]} "
            "perturbation; posgen scores one perturbation per cell"
        )
    if text is not None:
        kind, p, seed = "text", text, text_seed
    elif inside is not None:
        kind, p, seed = inside
    else:
        kind, p, seed = "none", None, None
    if p is not None and perturbation_value(p) == 0 and p.is_identity:
        kind, p, seed = "none", None, None  # rate 0 is the identity: the baseline
    value = 0.0 if p is None else perturbation_value(p)
    cid = f"{task}__none" if p is None else f"{task}__{kind}_{p.name}_{rate_label(value)}"
    return {
        "cell_id": cid,
        "task": task,
        "lm_eval_task": ev.lm_eval_task,
        "kind": kind,
        "scheme": "none" if p is None else p.name,
        "rate": value,
        "seed": seed,
        "perturbation_spec": "" if p is None else p.spec.to_json(),
        "perturbation_version": 0 if p is None else p.version,
        "split": ev.split,
    }


def collect(dirs: list[Path]) -> list[tuple[str, dict[str, Any], EvaluatedTask]]:
    """(model label, cell, evaluated task) of every task in the folders, checked for
    duplicates, settings that change what is scored made different within a model
    (:mod:`posgen.results.ingest.scored_settings`: dtype, max_length, few-shot, chat
    template, ...) and mixed seeds; baseline seeds set to the common seed."""
    items, seen = [], {}
    for path in results_files(dirs):
        for ev in evaluated_tasks(path):
            label, cell = model_label(ev), cell_of(ev)
            key = (label, cell["cell_id"])
            if key in seen:
                raise SchemaError(
                    f"cell {cell['cell_id']} of {label} is in two results files: "
                    f"{seen[key]} and {path}; pass each cell once"
                )
            seen[key] = path
            items.append((label, cell, ev))
    if not items:
        raise SchemaError("the lm-eval output holds no evaluated task")
    check_scored_settings(items)
    seeds = {c["seed"] for _, c, _ in items if c["kind"] != "none"}
    if len(seeds) > 1:
        raise SchemaError(
            f"mixed perturbation seeds {sorted(seeds)} (text tasks' _seed<S>, hf-posgen's "
            "perturb_seed); a run has one seed: ingest each seed into its own run"
        )
    seed = seeds.pop() if seeds else _default_seed()
    for _, cell, _ in items:
        cell["seed"] = seed
    _require_baselines(items)
    return items


def _default_seed() -> int:

    return DEFAULT_SEED


def _require_baselines(items: list[tuple[str, dict[str, Any], EvaluatedTask]]) -> None:
    have = {(label, c["task"]) for label, c, _ in items if c["kind"] == "none"}
    for label, c, ev in items:
        if c["kind"] != "none" and (label, c["task"]) not in have:
            raise SchemaError(
                f"{ev.where}: no baseline for {label} on {c['task']}; run the unperturbed "
                f"task {c['task']!r} with the same model and documents and pass its "
                "output folder too"
            )


def records(
    items: list[tuple[str, dict[str, Any], EvaluatedTask]], include_path: tuple[str, ...] = ()
) -> list[tuple[dict[str, Any], EvaluatedTask]]:
    """posgen cell records (as ``posgen run`` writes them); refuses documents that
    differ between a cell and its baseline. A task's own aggregation functions load from
    its YAML, found among lm-eval's tasks and the ``include_path`` folders."""
    out = []
    aggregations = Aggregations(include_path)  # one task manager for every cell
    for label, cell, ev in items:
        info = {
            "model_path": label,
            "model_revision": str(ev.config.get("model_sha") or ev.config.get("model_revision")),
            "dtype": model_dtype(ev),
            "random_init": False,
        }
        meta = {k: v for k, v in cell.items() if k != "cell_id"}
        rec = cell_record(
            meta,
            info,
            ev.results["results"],
            {ev.lm_eval_task: ev.samples},
            __version__,
            seed=cell["seed"],
            configs=ev.results.get("configs"),
            higher_is_better=ev.results.get("higher_is_better"),
            aggregations=aggregations,
        )
        out.append(({**rec, "model": label, "cell_id": cell["cell_id"]}, ev))
    try:
        perdoc_rows([r for r, _ in out])
    except SchemaError as e:
        raise SchemaError(f"{e} (lm-eval output of different --limit or data?)") from None
    return out


def ingest_config(
    items: list[tuple[str, dict[str, Any], EvaluatedTask]],
    scoring: Mapping[str, Any],
    include_path: tuple[str, ...] = (),
) -> RunConfig:
    """The run config of an ingested run: what the cells say, and where they came from."""
    cells = [c for _, c, _ in items]
    tasks = sorted({c["task"] for c in cells})
    # documents per task: lm-eval logs one sample per document and filter
    limits = {
        t: max(len({s.get("doc_id") for s in ev.samples}) for _, c, ev in items if c["task"] == t)
        for t in tasks
    }
    versions = sorted({str(ev.results.get("lm_eval_version", "?")) for _, _, ev in items})
    return RunConfig(
        **prompt_settings(items),
        posgen_version=__version__,
        schema_version=SCHEMA_VERSION,
        lm_eval_version=", ".join(versions),
        suite="ingested",
        suite_version=None,
        tasks=tuple(tasks),
        limits=limits,
        preset="ingest",
        seed=cells[0]["seed"],
        random_init_seed=None,
        models=_ingested_models(items),
        batch_size=None,
        sweep=_sweep_axes(cells),
        decompose=Decompose(docs=0, tokens=0),
        scoring=Scoring(**scoring),
        ingested_from=tuple(sorted({str(ev.results_file) for _, _, ev in items})),
        installed_lm_eval_version=importlib.metadata.version("lm_eval"),
        include_path=include_path,
    )


def _sweep_axes(cells: list[dict[str, Any]]) -> dict[str, SweepAxis]:
    """Each perturbed kind's schemes and values (0 among them), in the cells' order of kinds."""
    sweep: dict[str, tuple[set[str], set[float]]] = {}
    for c in cells:
        if c["kind"] != "none":
            schemes, values = sweep.setdefault(c["kind"], (set(), {0.0}))
            schemes.add(c["scheme"])
            values.add(c["rate"])
    return {
        kind: SweepAxis(tuple(sorted(schemes)), tuple(sorted(values)))
        for kind, (schemes, values) in sweep.items()
    }


def _ingested_models(
    items: list[tuple[str, dict[str, Any], EvaluatedTask]],
) -> tuple[ModelEntry, ...]:
    """One entry per model, in the order they first appear, labelled by its short label;
    its revision and dtype from its first output."""
    models: dict[str, ModelEntry] = {}
    names = list(dict.fromkeys(label for label, _, _ in items))
    short = dict(zip(names, short_labels(names), strict=True))
    for label, _, ev in items:
        if short[label] not in models:
            rev = ev.config.get("model_sha") or ev.config.get("model_revision")
            models[short[label]] = ModelEntry(
                label=short[label],
                path=label,
                embedded=label == "embedded",
                revision=str(rev),
                dtype=model_dtype(ev),
            )
    return tuple(models.values())


# lm-eval's prompt settings as its results file records them, under RunConfig's names
PROMPT_SETTINGS = {
    "gen_kwargs": lambda r: (r.get("config") or {}).get("gen_kwargs") or None,
    "system_instruction": lambda r: r.get("system_instruction") or None,
    "apply_chat_template": lambda r: bool(r.get("chat_template")),
    "fewshot_as_multiturn": lambda r: (
        bool(r.get("fewshot_as_multiturn")) if r.get("chat_template") else None
    ),
}


def prompt_settings(items: list[tuple[str, dict[str, Any], EvaluatedTask]]) -> dict[str, Any]:
    """The prompt settings (generation arguments, system prompt, chat template, few-shot
    turns) every lm-eval output was made with, as :class:`RunConfig` records them. Outputs
    made with different ones are refused (:class:`SchemaError`): a perturbed cell compares
    with its baseline only under the same prompt."""
    import json

    found = {}
    for name, read in PROMPT_SETTINGS.items():
        seen = {json.dumps(read(ev.results), sort_keys=True): read(ev.results) for *_, ev in items}
        if len(seen) > 1:
            raise SchemaError(
                f"the lm-eval outputs were made with different {name} ({', '.join(sorted(seen))})"
                ": a perturbed cell compares with its baseline only under the same prompt; "
                "ingest outputs made alike into one folder"
            )
        found[name] = next(iter(seen.values()))
    return found


def ingest(
    dirs: list[Path], out: Path, scoring: Mapping[str, Any], include_path: tuple[str, ...] = ()
) -> dict[str, Path]:
    """Read, check, write every cell into the run folder ``out``, then score and report;
    ``include_path``: the folders of the tasks' own YAML (``lm_eval --include_path``),
    recorded in the config so that reports and checks of the run read them too.

    Raises :class:`SchemaError` (bad or inconsistent lm-eval output, nothing written) or
    :class:`posgen.results.folder.store.RunConflictError` (``out`` holds another run, or
    cannot be written) or :class:`~posgen.results.folder.lock.RunLockedError` (another
    process writes it)."""

    items = collect(dirs)
    recs = records(items, include_path)
    config = ingest_config(items, scoring, include_path)
    with RunStore.create(out, config) as store:  # --out checked, the folder locked
        names = list(dict.fromkeys(rec["model"] for rec, _ in recs))
        short = dict(zip(names, short_labels(names), strict=True))
        for rec, ev in recs:
            raw = {k: ev.results.get(k) for k in RAW_KEYS}
            rec = {**rec, "model": short[rec["model"]]}  # the full path stays in model_path
            store.write_cell(
                rec["model"],
                rec["cell_id"],
                rec,
                raw_results=raw,
                samples={ev.lm_eval_task: ev.samples},
            )
        return regenerate(store.root)
