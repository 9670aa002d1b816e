"""``posgen tasks``: list the perturbed task family, show which fields of a task move, or
write a perturbed task config.

    posgen tasks list                     the shipped groups, the suite, the name grammar
    posgen tasks fields gsm8k mmlu_anatomy [--include-path DIR]
    posgen tasks name hellaswag --scheme swap --rate 0.05 --seed 7
    posgen tasks write hellaswag --scheme swap --rate 0.05 [--seed S] [--fields a,b]
                      [--perturb-fewshot] [--output-dir DIR] [--include-path DIR]

``fields`` prints each task's content fields and how they were decided (posgen's table,
inherited from a group or tag, or inferred from its ``doc_to_text``). ``write`` produces
one YAML file that includes the base task's own YAML, so it runs with
``lm_eval --include_path DIR --tasks <name>`` even where posgen's start-up hook is off;
it pins the content fields (needed for tasks posgen does not know) and prints how they
were decided.
"""

from __future__ import annotations

import argparse
import sys
import textwrap
from pathlib import Path
from typing import Any

from posgen.atomic import atomic_write_text
from posgen.harness.cli.arguments import add_include_path_argument
from posgen.harness.input_error import InputError

# the short parameter of each text scheme gets a flag (--rate, --window, ...)
_PARAM_HELP = {
    "rate": "fraction of words moved",
    "window": "window in words",
    "depth": "the evidence passage's depth in [0, 1]",
}


def _text_schemes() -> dict[str, str | None]:
    """scheme -> its short parameter (None: no parameter), from the registry."""
    from posgen.perturbations import registry

    return {n: registry.get("text", n).short_param for n in sorted(registry.names("text"))}


def configure_parser(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="tasks_command", metavar="ACTION", required=True)
    sub.add_parser("list", help="the shipped task family, the offline suite, the name grammar")
    fields = sub.add_parser(
        "fields",
        help="which doc fields of a task are perturbed, and how posgen decided",
        description="Print each task's content fields and how they were decided: posgen's "
        "table (the task's own entry, or its nearest tag, group or included config), or "
        "inferred (the one field its doc_to_text reads besides the target and the choices).",
    )
    fields.add_argument("task", nargs="+", help="lm-eval task names")
    add_include_path_argument(fields)
    for name, text in (
        ("name", "print the task name of a perturbation"),
        ("write", "write a perturbed task YAML for an lm-eval task"),
    ):
        p = sub.add_parser(name, help=text, description=text)
        p.add_argument("task", help="lm-eval task name, e.g. hellaswag, posgen_cloze")
        schemes = _text_schemes()
        p.add_argument("--scheme", choices=list(schemes), default="swap")
        for param in sorted({v for v in schemes.values() if v}):
            users = ", ".join(k for k, v in schemes.items() if v == param)
            p.add_argument(f"--{param}", help=f"{_PARAM_HELP.get(param, param)} ({users})")
        p.add_argument(
            "--seed",
            type=int,
            default=None,
            help="perturbation seed (default 1234, posgen.perturbations.DEFAULT_SEED)",
        )
        if name == "write":
            p.add_argument("--fields", help="comma-separated content fields (default: known)")
            p.add_argument(
                "--perturb-fewshot", action="store_true", help="perturb the few-shot examples too"
            )
            p.add_argument("--output-dir", type=Path, default=Path("posgen_tasks"))
            add_include_path_argument(p)


def _task_manager(args: argparse.Namespace) -> Any:
    """posgen's TaskManager, with ``--include-path`` folders (each checked first)."""
    from posgen.harness.run.options import check_include_paths
    from posgen.tasks.lm_eval_tasks import task_manager

    try:
        paths = check_include_paths(getattr(args, "include_path", None))
    except InputError as e:
        print(f"posgen tasks: {e}", file=sys.stderr)
        raise SystemExit(2) from None
    return task_manager(include_path=list(paths)) if paths else task_manager()


def _perturbation(args: argparse.Namespace) -> Any:
    from posgen.perturbations import PerturbationError, parse

    param = _text_schemes()[args.scheme]
    value = getattr(args, param) if param else None
    if param and value is None:
        raise SystemExit(f"posgen tasks: --scheme {args.scheme} needs --{param}")
    try:
        return parse("text", args.scheme if value is None else f"{args.scheme}:{value}")
    except PerturbationError as exc:
        raise SystemExit(f"posgen tasks: {exc}") from None


def _list() -> int:
    from posgen.results.folder.metrics import MetricSpec
    from posgen.results.scores.metric_units import primary
    from posgen.tasks import family, naming, offline
    from posgen.tasks.content_fields_table import KNOWN

    print("Offline suite (primary metric):")
    for task in offline.SUITE_TASKS:
        specs = [MetricSpec.from_dict(m) for m in family.BASE_TASKS[task]["metric_list"]]
        print(f"  {task:<14} {primary(specs).label}")
    others = [t for t in offline.TASKS if t not in offline.SUITE_TASKS]
    if others:
        print("Other offline tasks (metrics; not in the default suite or its groups):")
    for task in others:
        specs = [MetricSpec.from_dict(m) for m in family.BASE_TASKS[task]["metric_list"]]
        print(f"  {task:<14} {', '.join(s.label for s in specs)}")
    print("\nShipped groups (each over the offline suite):")
    for p in family.shipped_perturbations():
        print(f"  {naming.format_name(p, None):<26} {p.spec.to_string()}")
    print(f"\nAny task, rate or seed resolves by name:\n  {naming.grammar()}")
    print(
        f"\nContent fields known for {len(KNOWN)} lm-eval tasks, groups and tags (a task "
        "inherits its group's or tag's; `posgen tasks fields TASK` shows them):"
    )
    print(textwrap.fill(", ".join(KNOWN), width=88, initial_indent="  ", subsequent_indent="  "))
    return 0


def _fields(args: argparse.Namespace) -> int:
    from posgen.tasks.content_fields import UnknownContentFields

    tm = _task_manager(args)
    status = 0
    for task in args.task:
        try:
            print(tm.content_fields(task).describe())
        except (UnknownContentFields, KeyError) as exc:
            message = exc.args[0] if isinstance(exc, KeyError) else str(exc)
            print(f"posgen tasks fields: {message}", file=sys.stderr)
            status = 2
    return status


def _write(args: argparse.Namespace, p: Any, name: str) -> int:
    import json

    from posgen.perturbations.seeding import DEFAULT_SEED
    from posgen.tasks.content_fields import UnknownContentFields
    from posgen.tasks.family import Fn, yaml_text
    from posgen.tasks.perturbed_task import TaskPerturbation

    tm = _task_manager(args)
    entry = tm.task_index.get(args.task)
    if entry is None or entry.yaml_path is None or "class" in (entry.cfg or {}):
        raise SystemExit(
            f"posgen tasks write: {args.task!r} is not a YAML task of lm-eval; "
            f"use the name {name} with lm_eval directly"
        )
    if p.moves == "passages":  # an evidence depth: the task declares its own fields
        return _write_depth(args, p, name, entry)
    fields_arg = args.fields.split(",") if args.fields else None
    try:
        choice = tm.content_fields(args.task, fields_arg)
    except (UnknownContentFields, KeyError) as exc:
        message = exc.args[0] if isinstance(exc, KeyError) else exc
        raise SystemExit(f"posgen tasks write: {message}") from None
    fields = choice.fields
    seed = DEFAULT_SEED if args.seed is None else args.seed
    tp = TaskPerturbation(p, seed, args.task, fields, args.perturb_fewshot)
    text = yaml_text(
        {
            "include": str(Path(entry.yaml_path).resolve()),
            "task": name,
            "tag": [],
            "class": Fn("posgen.tasks.perturbed_task.PerturbedTask"),
            "posgen_perturbation": tp.to_dict(),
        }
    )
    path = args.output_dir / f"{name}.yaml"
    atomic_write_text(path, text)
    print(choice.describe())
    print(f"wrote {path}\nrun: lm_eval --include_path {args.output_dir} --tasks {name} ...")
    print(json.dumps(tp.to_dict()), file=sys.stderr)
    return 0


def _write_depth(args: argparse.Namespace, p: Any, name: str, entry: Any) -> int:
    """A YAML config of ``perm_depth_<D>pct_<task>`` that includes the task's own YAML
    (which must declare the passage fields: docs/depth.md)."""
    from posgen.perturbations.seeding import DEFAULT_SEED
    from posgen.tasks.depth_protocol import declared_fields, missing_protocol
    from posgen.tasks.family import depth_yaml, yaml_text

    if declared_fields(args.task, (entry.cfg or {}).get("metadata")) is None:
        raise SystemExit(f"posgen tasks write: {missing_protocol(args.task)}")
    seed = DEFAULT_SEED if args.seed is None else args.seed
    cfg = {**depth_yaml(p, args.task, seed), "include": str(Path(entry.yaml_path).resolve())}
    path = args.output_dir / f"{name}.yaml"
    atomic_write_text(path, yaml_text(cfg))
    print(f"wrote {path}\nrun: lm_eval --include_path {args.output_dir} --tasks {name} ...")
    return 0


def main(args: argparse.Namespace) -> int:
    if args.tasks_command == "list":
        return _list()
    if args.tasks_command == "fields":
        return _fields(args)
    p = _perturbation(args)
    from posgen.perturbations.seeding import DEFAULT_SEED
    from posgen.tasks.naming import format_name

    seed = DEFAULT_SEED if args.seed is None else args.seed
    if seed < 0:
        raise SystemExit("posgen tasks: --seed must be >= 0")
    name = format_name(p, args.task, seed)
    if args.tasks_command == "name":
        print(name)
        return 0
    return _write(args, p, name)
