"""lm-eval output folders, read back: results files, their logged samples, and the
perturbation each evaluated task carries.

``lm_eval --output_path DIR --log_samples`` writes, per run,
``DIR/<model>/results_<time>.json`` and one ``samples_<task>_<time>.jsonl`` per task
beside it (the same ``<time>``). A task is recognised as a posgen cell from

- its name: ``perm_<scheme>_<level>[_seed<S>]_<task>`` is a text cell of ``<task>``
  (:mod:`posgen.tasks.naming`), any other name is unperturbed text;
- the ``hf-posgen`` model record in the results (``config.posgen``: position and
  feature specs and ``perturb_seed``; ``posgen run`` keeps it in each cell's raw output
  too); any other model (``hf``, ``vllm``, an API model) perturbs nothing inside the
  model. An ``hf-posgen`` output with ``layers=``, ``heads=``, ``logits=`` or ``length=``
  (in its record or its ``model_args``) is refused: a run folder's cells are the plain
  model or a scheme in every layer, and ``posgen layers``, ``posgen cause`` and
  ``posgen length`` measure those settings.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posgen.perturbations import PerturbationError, registry
from posgen.perturbations.base import Perturbation
from posgen.results.folder.config import MODEL_SIDE_KINDS
from posgen.results.folder.schema import SchemaError
from posgen.tasks.naming import parse_name


@dataclass(frozen=True)
class EvaluatedTask:
    """One task of one lm-eval results file, with its logged samples."""

    results_file: Path
    lm_eval_task: str
    results: Mapping[str, Any]  # the whole results file
    samples: list[dict[str, Any]]

    @property
    def config(self) -> Mapping[str, Any]:
        return self.results.get("config") or {}

    @property
    def task_config(self) -> Mapping[str, Any]:
        return (self.results.get("configs") or {}).get(self.lm_eval_task) or {}

    @property
    def split(self) -> str:
        cfg = self.task_config
        return cfg.get("test_split") or cfg.get("validation_split") or "test"

    @property
    def where(self) -> str:
        return f"{self.results_file} / {self.lm_eval_task}"


def results_files(dirs: list[Path]) -> list[Path]:
    """Every ``results_*.json`` under the given folders (a results file itself is
    accepted too), sorted; refuses a folder without any."""
    out: list[Path] = []
    for d in dirs:
        d = Path(d)
        if d.is_file() and d.name.startswith("results_") and d.suffix == ".json":
            out.append(d)
            continue
        if not d.is_dir():
            raise SchemaError(f"{d}: no such lm-eval output folder")
        found = sorted(d.rglob("results_*.json"))
        if not found:
            raise SchemaError(
                f"{d}: no lm-eval results_*.json inside; pass the folder given to "
                "lm_eval --output_path (written with --log_samples)"
            )
        out.extend(found)
    return sorted(set(out))


def _load_json(path: Path) -> dict[str, Any]:
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SchemaError(f"{path} is not valid JSON: {e}") from None
    if not isinstance(data, dict) or "results" not in data:
        raise SchemaError(f"{path} is not an lm-eval results file (no 'results' key)")
    return data


def _load_samples(path: Path) -> list[dict[str, Any]]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    raise SchemaError(f"{path}:{n}: not a JSON line: {e}") from None
    # several processes log in rank order (lm-eval issue 1401): put documents in order
    return sorted(rows, key=lambda s: s.get("doc_id", 0))


def evaluated_tasks(path: Path) -> Iterator[EvaluatedTask]:
    """The tasks of one results file (groups skipped) with their samples; refuses a task
    whose samples were not logged."""
    data = _load_json(path)
    stamp = path.stem[len("results_") :]
    for task in sorted(data.get("configs") or {}):
        samples = path.parent / f"samples_{task}_{stamp}.jsonl"
        if not samples.is_file():
            raise SchemaError(
                f"{path}: no logged samples for {task!r} (expected {samples.name}); "
                "rerun lm_eval with --log_samples"
            )
        yield EvaluatedTask(path, task, data, _load_samples(samples))


def model_args(config: Mapping[str, Any]) -> dict[str, Any]:
    """lm-eval's recorded ``model_args`` as a dict (older versions store the string)."""
    args = config.get("model_args") or {}
    if isinstance(args, str):
        pairs = (kv.split("=", 1) for kv in args.split(",") if "=" in kv)
        return {k.strip(): v.strip() for k, v in pairs}
    return dict(args)


def model_side(ev: EvaluatedTask) -> tuple[str, Perturbation, int] | None:
    """The position or feature perturbation ``hf-posgen`` ran under: (kind, perturbation,
    seed), or None. Refuses both at once (one perturbation per cell) and any setting a
    run folder cannot represent (:func:`refuse_unrepresentable`)."""
    cfg = ev.config
    record = cfg.get("posgen")
    # hf-posgen's record: under `lm_eval --model hf-posgen`, and in posgen run's own raw
    # output (lm-eval names the model there by its path)
    if cfg.get("model") != "hf-posgen" and not isinstance(record, Mapping):
        return None
    if not isinstance(record, Mapping):
        raise SchemaError(
            f"{ev.where}: an hf-posgen run without its 'posgen' record in the results; "
            "rerun it with this posgen's hf-posgen model"
        )
    refuse_unrepresentable(ev, record)
    found = []
    for kind, key in MODEL_SIDE_KINDS.items():
        spec = record.get(key)
        if spec is not None:
            try:
                found.append((kind, registry.from_spec(spec), int(record["perturb_seed"])))
            except (PerturbationError, KeyError, TypeError, ValueError) as e:
                raise SchemaError(f"{ev.where}: unreadable hf-posgen {key} record: {e}") from None
    if len(found) > 1:
        raise SchemaError(
            f"{ev.where}: positions= and features= together; posgen scores one "
            "perturbation per cell, run them separately"
        )
    return found[0] if found else None


# hf-posgen's model-side settings beyond a whole-model positions=/features=: a run
# folder's cells (results.folder.plan, what posgen run evaluates) have no place for them;
# each with the command whose folder does
UNREPRESENTABLE = {
    "layers": "posgen layers",
    "heads": "posgen layers --heads",
    "logits": "posgen cause",
    "length": "posgen length",
}


def unrepresentable_settings(ev: EvaluatedTask, record: Mapping[str, Any]) -> dict[str, str]:
    """The settings of :data:`UNREPRESENTABLE` an ``hf-posgen`` output ran with, as
    ``name -> value``, read from its ``posgen`` record (short forms) and from lm-eval's
    ``model_args`` (a record of an older posgen may lack them); ``length=none`` (the
    plain model) is no setting."""
    args = model_args(ev.config)
    found = {}
    for name in UNREPRESENTABLE:
        value = record.get(f"{name}_str", record.get(name))
        if value is None or value == "":
            value = args.get(name)
        if value is not None and str(value).strip().lower() not in ("", "none"):
            found[name] = str(value)
    return found


def refuse_unrepresentable(ev: EvaluatedTask, record: Mapping[str, Any]) -> None:
    """Refuse (:class:`SchemaError`, one line) an ``hf-posgen`` output run with
    ``layers=``, ``heads=``, ``logits=`` or ``length=``: as a run folder's cell it would
    pass for the plain model (``logits=additive``) or for the scheme in every layer."""
    found = unrepresentable_settings(ev, record)
    if not found:
        return
    given = ", ".join(f"{k}={v}" for k, v in found.items())
    tools = " / ".join(dict.fromkeys(UNREPRESENTABLE[k] for k in found))
    raise SchemaError(
        f"{ev.where}: hf-posgen ran with {given}, which a run folder cannot represent (its "
        "cells are the plain model or positions=/features= in every layer); measure that "
        f"with {tools}, and ingest only outputs without layers=, heads=, logits= or length="
    )


def text_side(ev: EvaluatedTask) -> tuple[str, Perturbation | None, int | None]:
    """(base task, text perturbation or None, its seed or None) from the task name."""
    try:
        parsed = parse_name(ev.lm_eval_task)
    except PerturbationError as e:
        raise SchemaError(f"{ev.where}: {e}") from None
    if parsed is None:
        return ev.lm_eval_task, None, None
    if parsed.base_task is None:
        raise SchemaError(f"{ev.where}: a perturbed group name, not a task")
    return parsed.base_task, parsed.perturbation, parsed.seed


def perturbation_value(p: Perturbation) -> float:
    """The swept value of a perturbation: its one short parameter (rate, σ, window);
    1.0 for a scheme without parameters (``shuffle``: every word moves)."""
    if p.short_param is None:
        return 1.0
    return float(getattr(p, p.short_param))
