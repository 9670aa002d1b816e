"""The resolved config of ``posgen run``, checked before any model loads (its cells:
:func:`posgen.results.folder.plan.plan_cells`).

Light imports only (no torch, transformers or lm-eval unless a suite other than
``offline`` must be checked against lm-eval's task index).
"""

from __future__ import annotations

import argparse
import difflib
import importlib.metadata
import math
import re
from collections.abc import Iterable
from dataclasses import replace
from pathlib import Path
from typing import Any

from posgen import __version__
from posgen.harness.loading.entries import model_entries
from posgen.harness.loading.load import position_limit
from posgen.harness.loading.options import LoadOptions
from posgen.harness.run.depth_lengths import with_lengths
from posgen.harness.run.depth_sweep import KIND as DEPTH
from posgen.harness.run.depth_sweep import depth_limit, depth_sweep
from posgen.harness.run.options import (
    PlanError,
    check_include_paths,
    parse_batch_size,
    prompt_options,
)
from posgen.harness.run.task_index import (
    known_task_names,
    stored_task_names,
    unwritten_names,
)
from posgen.perturbations.seeding import DEFAULT_SEED
from posgen.results.folder.config import (
    MODEL_SIDE_KINDS,
    Decompose,
    DepthSweep,
    RunConfig,
    Scoring,
    SweepAxis,
)
from posgen.results.folder.schema import SCHEMA_VERSION
from posgen.results.folder.store import RUNS_ROOT, default_folder
from posgen.tasks import offline  # looked up at call time (tests pin the suite)
from posgen.tasks.naming import PREFIX

# The sweep grids. Rates: fraction of words (text) or positions (position) moved;
# sigmas: std of the Gaussian jitter of each position before RoPE, in positions.
DEFAULT_RATES = (0.0, 0.01, 0.02, 0.05, 0.10, 0.20, 0.50)
DEFAULT_SIGMAS = (0.0, 0.5, 1.0, 2.0)
QUICK_RATES = (0.0, 0.05, 0.20, 0.50)
QUICK_SIGMAS = (0.0, 1.0)
SCHEMES = {"text": ("swap",), "position": ("swap",), "feature": ("rope_noise",)}
# Documents per task, chosen so the default run of the embedded model fits in 10 minutes
# and --quick in 2 on two CPU cores (see the README for the measured times). posgen_recall
# (generative, not in the default suite) gets these with --suite posgen_recall.
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


def shipped_limit(task: str, limit: int) -> int:
    """``limit`` read as lm-eval reads ``--limit`` ("at most"), made exact for posgen's own
    tasks, whose documents are known offline: the number that runs, which is what the
    run folder records and the report states. Other tasks keep the limit asked."""

    return min(limit, len(offline.load_rows(f"{task}.jsonl"))) if task in offline.TASKS else limit


def limit_notes(asked: int | None, config: RunConfig) -> list[str]:
    """A note per posgen task with fewer documents than ``--limit`` asked."""
    if asked is None:
        return []
    return [
        f"--limit {asked}: {task} has {ran} documents; all {ran} run and the folder records {ran}"
        for task, ran in config.limits.items()
        if ran < asked
    ]


_NO_POSITIONS = {
    "rotary": "has no rotary position embedding (its config has no rope_* setting)",
    "none": "has no position encoding (the causal mask is its only order signal)",
    "unadapted": "has an ALiBi attention whose logits posgen run does not fit (its position "
    "family was registered with a logits_refusal; BLOOM's, MPT's and Falcon's it fits)",
}


def check_model_side_kinds(config: RunConfig) -> list[str]:
    """Notes for models whose positions posgen cannot move (they get only the text
    cells); refuses a run that asked only for model-side kinds of such a model. RoPE,
    learned absolute and ALiBi (BLOOM, MPT, Falcon) models get every kind."""
    flat = [m for m in config.models if not m.model_side and not m.random_init]
    if not flat or not any(k in config.sweep for k in MODEL_SIDE_KINDS):
        return []
    if all(k in MODEL_SIDE_KINDS for k in config.sweep):
        m = flat[0]
        raise PlanError(
            f"{m.label} {_NO_POSITIONS[m.positions]}, so position and feature perturbations "
            "do not apply; add --kinds text or choose a model with RoPE, learned absolute "
            "or ALiBi (BLOOM, MPT, Falcon) positions"
        )
    return [
        f"{m.label} {_NO_POSITIONS[m.positions]}: it gets the text cells only (position and "
        "feature cells and the attention-logit decomposition do not apply)"
        for m in flat
    ]


def suite_tasks(suite: str, include_path: tuple[str, ...] = ()) -> tuple[list[str], int | None]:
    """The tasks of a suite and its version (None for a list of lm-eval tasks); a task
    of the ``include_path`` folders (the user's own YAML) is known by their index."""

    if suite == "offline":
        return list(offline.SUITE_TASKS), offline.SUITE_VERSION
    tasks = [t.strip() for t in suite.split(",") if t.strip()]
    if not tasks:
        raise PlanError("--suite: give 'offline' or a comma-separated list of lm-eval tasks")

    own = included_task_names(include_path) if include_path else frozenset()
    if stored_task_names() is None:  # before the index: refuse what no task file names
        absent, declared = unwritten_names(t for t in tasks if not _posgen_name(t, own))
        if absent:
            _refuse_task(absent[0], [*declared, *own])
    known = known_task_names(lambda: shared_task_manager().all_tasks) | own
    for t in tasks:
        if t not in known:
            _refuse_task(t, known)
    return tasks, None


def included_task_names(include_path: tuple[str, ...]) -> frozenset[str]:
    """The task, group and tag names of the ``include_path`` folders alone, as lm-eval
    indexes them (their folders only: milliseconds, not lm-eval's whole index)."""
    from posgen.tasks.lm_eval_tasks import PosgenTaskManager

    manager = PosgenTaskManager(include_path=list(include_path), include_defaults=False)
    return frozenset(manager.all_tasks)


def _posgen_name(task: str, own: frozenset[str] = frozenset()) -> bool:
    """A name of posgen's own tasks (the offline suite, the perturbed family) or of the
    user's own task folders (``own``)."""

    return task in offline.TASKS or task.startswith(PREFIX) or task in own


def _refuse_task(task: str, names: Iterable[str]) -> None:
    close = difflib.get_close_matches(task, sorted(names), n=3)
    hint = f"; did you mean {', '.join(close)}?" if close else ""
    raise PlanError(
        f"--suite: unknown suite or lm-eval task {task!r}{hint} (suites: offline; a task "
        "of your own YAML: add its folder with --include-path DIR)"
    )


def shared_task_manager(include_path: tuple[str, ...] = ()) -> Any:
    """posgen's lm-eval TaskManager with the ``include_path`` folders, built once per
    process (indexing every task YAML takes seconds)."""
    from posgen.tasks.lm_eval_tasks import shared_task_manager as shared

    return shared(include_path)


def resolve_config(args: argparse.Namespace) -> RunConfig:
    """Everything a run depends on (``to_dict()`` is hashed to name the run)."""
    preset = "quick" if args.quick else "default"
    batch_size = _checked_numbers(args)
    rates = parse_values(args.rates, QUICK_RATES if args.quick else DEFAULT_RATES, "rates", 1.0)
    sigmas = parse_values(
        args.sigmas, QUICK_SIGMAS if args.quick else DEFAULT_SIGMAS, "sigmas", None
    )
    include_path = check_include_paths(getattr(args, "include_path", None))
    tasks, suite_version = suite_tasks(args.suite, include_path)
    models = model_entries(
        args.models or ["embedded"],
        LoadOptions.from_args(args),
        random_init=args.random_init,
        seed=args.seed,
    )
    kinds = parse_kinds(getattr(args, "kinds", None))
    depth = depth_sweep(
        args,
        kinds,
        None if args.suite == "offline" else tuple(tasks),
        None if args.suite == "offline" else shared_task_manager(include_path).task_config,
    )
    depth = with_lengths(depth, getattr(args, "depth_lengths", None), models)  # tokenizer read
    if depth is not None and kinds == (DEPTH,):
        tasks = list(depth.tasks)  # depth cells only: no rate task
    limits = _limits(tasks, depth, args.limit, preset)
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
        include_path=include_path,
        depth=depth,
        **prompt_options(args),
    )


def _limits(
    tasks: list[str], depth: DepthSweep | None, asked: int | None, preset: str
) -> dict[str, int]:
    """Documents per task: the preset's (or ``--limit``); a built-in depth task its own."""
    limits = {
        t: shipped_limit(t, asked or LIMITS[preset].get(t, OTHER_TASK_LIMIT[preset])) for t in tasks
    }
    if depth is not None:  # a suite task keeps its rate limit
        limits |= {t: depth_limit(t, asked, preset) for t in depth.tasks if t not in limits}
    return limits


def hold_decomposition(config: RunConfig) -> tuple[RunConfig, list[str]]:
    """``config`` with its probe windows held to the fewest positions one forward of a
    model it fits takes (a learned table's rows, MPT's ``max_seq_len``: each model's
    config read, no weights), so that every model is fitted on the same windows, and a
    note naming the model that holds them (none when the preset's windows fit)."""
    spec = config.decompose
    fitted = [m for m in config.models if m.model_side and not m.random_init]
    limits = [(limit[1], limit[0], m.label) for m in fitted if (limit := position_limit(m))]
    if not spec.docs or not limits or min(limits)[0] >= spec.tokens:
        return config, []
    most, field, label = min(limits)
    note = (
        f"the decomposition fits {spec.docs} probe windows of {most} tokens, not "
        f"{spec.tokens}: {label}'s config sets {field} = {most}, the most positions one "
        "forward of it takes (every model is fitted on the same windows)"
    )
    return replace(config, decompose=replace(spec, tokens=most)), [note]


def _checked_numbers(args: argparse.Namespace) -> int | str:
    """The run's numeric flags checked, in this order: ``--limit``, ``--seeds``,
    ``--batch-size``, ``--seed``, the thresholds; returns the batch size as lm-eval takes
    it."""
    if args.limit is not None and args.limit < 1:
        raise PlanError("--limit must be >= 1")
    if getattr(args, "seeds", 1) < 1:
        raise PlanError("--seeds must be >= 1")
    batch_size = parse_batch_size(str(args.batch_size))
    if not 0 <= args.seed < 2**32:
        raise PlanError(f"--seed must be an integer in [0, 2**32), got {args.seed}")
    _check_threshold("--threshold", args.threshold, 10.0, "relative perplexity increase")
    _check_threshold("--threshold-acc", args.threshold_acc, 1.0, "absolute accuracy drop")
    return batch_size


def parse_kinds(text: str | None) -> tuple[str, ...]:
    """``--kinds text,position,depth`` -> the perturbation kinds to sweep (default: the
    rate kinds, text, position and feature; ``depth`` adds the evidence-depth cells)."""
    if text is None:
        return tuple(SCHEMES)
    kinds = tuple(dict.fromkeys(k.strip() for k in text.split(",") if k.strip()))
    bad = [k for k in kinds if k not in (*SCHEMES, DEPTH)]
    if bad or not kinds:
        raise PlanError(
            f"--kinds: {', '.join(bad) or repr(text)} not a perturbation kind; "
            f"give a comma-separated subset of {','.join((*SCHEMES, DEPTH))}"
        )
    return kinds


def _check_threshold(flag: str, value: float, upper: float, what: str) -> None:
    if not (math.isfinite(value) and 0 < value < upper):
        raise PlanError(f"{flag} ({what}) must be a number in (0, {upper:g}), got {value}")


def default_out(config: RunConfig) -> Path:
    """./posgen-runs/run/<models>_<suite>[_random-init][_quick][_seed<S>] (seed only when
    not the default); an earlier release's ./posgen-runs/<name> where only that exists."""
    models = "+".join(m.label for m in config.models if not m.random_init)
    name = re.sub(r"[^A-Za-z0-9._+-]+", "_", f"{models}_{config.suite}").strip("_")[:80]
    name += "_random-init" if any(m.random_init for m in config.models) else ""
    name += "_quick" if config.preset == "quick" else ""
    name += "" if config.seed == DEFAULT_SEED else f"_seed{config.seed}"
    return default_folder("run", name, RUNS_ROOT / name)
