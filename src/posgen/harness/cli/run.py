"""``posgen run``: sweep, decomposition, scores and report (see :mod:`posgen.harness.run.sweep`).

Under ``accelerate launch`` or ``torchrun`` every rank runs this; rank 0 alone takes the
run folder's lock, creates the folder and writes into it.
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from pathlib import Path

from posgen.harness.cli.arguments import add_include_path_argument, add_threshold_arguments
from posgen.harness.input_error import InputError
from posgen.harness.loading.options import add_loading_arguments, check_device
from posgen.harness.out_folder import check_out_folder
from posgen.harness.run.depth_sweep import ACCOUNT_DOCS
from posgen.harness.run.metric_check import check_run_metrics
from posgen.harness.run.options import parse_bool
from posgen.harness.run.resolve import (
    check_model_side_kinds,
    default_out,
    hold_decomposition,
    limit_notes,
    resolve_config,
)
from posgen.perturbations.seeding import DEFAULT_SEED


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        action="append",
        dest="models",
        metavar="ID_OR_PATH",
        help="model to sweep (repeatable): a local folder, a hub id, or "
        "'embedded' (SmolLM2-135M, the default)",
    )
    parser.add_argument(
        "--suite",
        default="offline",
        help="'offline' (posgen_prose + posgen_cloze, the default) or a "
        "comma-separated list of lm-eval tasks (yours too, with --include-path)",
    )
    add_include_path_argument(parser)
    parser.add_argument(
        "--quick",
        action="store_true",
        help="a coarser grid on fewer documents (about 2 minutes on CPU)",
    )
    parser.add_argument(
        "--random-init",
        action="store_true",
        help="also sweep a seeded random-init twin of each model",
    )
    parser.add_argument("--out", type=Path, help="run folder (default ./posgen-runs/run/<name>)")
    parser.add_argument(
        "--seed", type=int, default=DEFAULT_SEED, help=f"perturbation seed ({DEFAULT_SEED})"
    )
    parser.add_argument(
        "--seeds",
        type=int,
        default=1,
        help="perturbation seeds per cell (seed, seed+1, ...; one model load); the "
        "scores average each document over them and the intervals include the draw",
    )
    parser.add_argument(
        "--limit", type=int, help="documents per task (default: per-task limits of the preset)"
    )
    parser.add_argument(
        "--rates",
        help="comma-separated rates for text and position swap "
        "(0 included for the baseline), e.g. 0,0.05,0.2",
    )
    parser.add_argument("--sigmas", help="comma-separated σ for rope_noise, e.g. 0,0.5,2")
    parser.add_argument(
        "--kinds",
        help="perturbation kinds to sweep, a comma-separated subset of "
        "text,position,feature,depth (default: text,position,feature); position and "
        "feature cells of a generative task perturb the prompt, and generated tokens "
        "continue at natural positions after it; depth: the evidence passage at each of "
        "--depths, in both forms (text: perm_depth_<D>pct_<task>; position: hf-posgen "
        "positions=depth:D), on the built-in depth tasks (or the --suite tasks, which must "
        "declare metadata.posgen_depth; docs/depth.md)",
    )
    parser.add_argument(
        "--depths",
        help="comma-separated evidence depths in [0, 1] for --kinds depth (0: first "
        "passage, 1: last before the question; default 0,0.25,0.5,0.75,1, --quick 0,0.5,1)",
    )
    parser.add_argument(
        "--depth-lengths",
        metavar="L1,L2,...",
        help="with --kinds depth: context lengths, each a fraction of the model's trained "
        "context C in (0, 1] (0.25, 1.0) or a number of tokens (an integer > 1, 512); each "
        "built-in depth task runs at each, as its variant <task>_n<N> with N passages "
        "chosen with the model's tokenizer (one model per run; docs/depth.md)",
    )
    parser.add_argument(
        "--depth-account",
        type=int,
        nargs="?",
        const=ACCOUNT_DOCS,
        metavar="N",
        help="with --kinds depth: also the decomposition's account of the depth curve on N "
        f"documents per built-in log-likelihood depth task (default {ACCOUNT_DOCS}): the gold "
        "NLL at depths 0, 0.5, 1 under logits=additive, distance and key, and the question's "
        "attention mass on the evidence, measured and fitted, per layer (docs/depth.md; "
        "about 12 replaced-logits forwards per document and depth)",
    )
    add_threshold_arguments(parser)
    parser.add_argument(
        "--batch-size", default="8", help="lm-eval batch size: N, auto or auto:N (default 8)"
    )
    add_loading_arguments(parser)
    prompt = parser.add_argument_group(
        "prompts (as lm-eval's; see docs/running.md for what each perturbation touches)"
    )
    prompt.add_argument(
        "--num-fewshot",
        type=int,
        metavar="N",
        help="few-shot examples per document for every task (default: each task's own); "
        "text cells perturb the target document only, model-side cells the whole context",
    )
    prompt.add_argument(
        "--apply-chat-template",
        nargs="?",
        const=True,
        metavar="TEMPLATE_NAME",
        help="render prompts with the tokenizer's chat template (or the named one), few-shot "
        "examples as turns; text cells perturb the content before rendering",
    )
    prompt.add_argument(
        "--fewshot-as-multiturn",
        nargs="?",
        const=True,
        type=parse_bool,
        metavar="BOOL",
        help="few-shot examples as chat turns (needs --apply-chat-template; the default "
        "with it, so only 'false' changes anything: then one user turn holds them all)",
    )
    prompt.add_argument(
        "--system-instruction",
        metavar="TEXT",
        help="a system instruction before every prompt (a system turn under a chat "
        "template); text cells leave it as it is, model-side cells perturb it with the context",
    )
    prompt.add_argument(
        "--gen-kwargs",
        metavar="K=V,...",
        help="generation arguments of generate_until tasks over each task's own, as "
        "lm_eval --gen_kwargs: key=value pairs or a JSON object, e.g. "
        "'max_gen_toks=64,until=[\"\\n\"]' (log-likelihood tasks ignore them)",
    )
    parser.add_argument("--no-progress", action="store_true", help="no progress bar")
    parser.add_argument(
        "--length",
        nargs="?",
        const="quick",
        metavar="SCHEMES",
        help="also run `posgen length` per model into RUN/length/<model>/ and report it: "
        "'quick' (2 documents to 1.5 C, none;lambda;infllm;scale) or ';'-separated length schemes",
    )


def main(args: argparse.Namespace) -> int:
    from posgen.harness.loading import require_compatible
    from posgen.results.folder.run_store import RunStore

    try:
        if args.out is not None:
            check_out_folder(args.out, folder=RunStore)  # before any model's config is read
        config = resolve_config(args)  # every check before any model loads
        notes = check_model_side_kinds(config) + limit_notes(args.limit, config)
        if args.length and args.length != "quick":
            _check_length(args.length)
        check_device(args.device)
        out = check_out_folder(args.out or default_out(config), folder=RunStore)
        length = _length_jobs(args, config, out)
        notes += check_run_metrics(config)  # reads the tasks' configs: the slowest check
        require_compatible(config.models)  # posgen.compat, before the first cell
        config, held = hold_decomposition(config)  # each model's config read, no weights
        notes += held
    except InputError as e:
        print(f"posgen run: {e}", file=sys.stderr)
        return 2
    from posgen.harness.launch import Launch
    from posgen.results.folder.lock import RunLockedError
    from posgen.results.folder.store import RunConflictError

    launch = Launch.detect()  # one process, or every rank of accelerate launch / torchrun
    if launch.is_main:
        for note in notes:
            print(f"posgen run: note: {note}", file=sys.stderr)
    try:
        paths = _run_in_folder(args, config, out, launch, length)
    except (RunConflictError, RunLockedError, InputError) as e:
        if launch.is_main:
            print(f"posgen run: {e}", file=sys.stderr)
        return 2
    finally:
        launch.finish()
    if launch.is_main and paths is not None:
        from posgen.results.report.build import not_scored_notes

        for note in not_scored_notes(out):
            print(f"posgen run: note: {note}", file=sys.stderr)
        print(f"posgen run: report in {paths['html']} (and {paths['md'].name})")
    return 0


def _run_in_folder(args: argparse.Namespace, config, out: Path, launch, length: list):
    """The run in its folder (:meth:`RunStore.create`: rank 0 checks ``--out``, takes the
    lock and starts or resumes the run; a refusal stops every rank), then the length runs
    and the scores and report once (rank 0; the other ranks get None)."""
    from posgen.results.folder.lock import RunLockedError
    from posgen.results.folder.run_store import RunStore
    from posgen.results.folder.store import RunConflictError

    if not launch.is_main:
        error = launch.share(None)
        if error is not None:
            raise RunConflictError(error)
        return _sweep(args, RunStore.open(out), launch)
    with contextlib.ExitStack() as stack:
        try:
            store = stack.enter_context(RunStore.create(out, config, note=_note))
        except (RunConflictError, RunLockedError) as e:
            launch.share(str(e))
            raise
        launch.share(None)
        return _sweep(args, store, launch, length)


def _sweep(args: argparse.Namespace, store, launch, length: list | None = None):
    from posgen.harness.run.sweep import run_sweep
    from posgen.results.report.build import regenerate

    run_sweep(store, device=args.device, progress=not args.no_progress, launch=launch)
    if not launch.is_main:
        return None
    _run_length(length or [])
    return regenerate(store.root)


def _note(message: str) -> None:
    print(f"posgen run: {message}", file=sys.stderr)


def _length_jobs(args: argparse.Namespace, config, out: Path) -> list:
    """``--length``: a checked length run per model (each model's config read, no
    weights), into ``RUN/length/<model>/``."""
    if not args.length:
        return []
    from posgen.harness.length.job import jobs_for_run

    return jobs_for_run(out, config.models, args.length, args.device)


def _run_length(jobs: list) -> None:
    from posgen.harness.length.job import run_job

    def note(message: str) -> None:
        print(f"posgen run: length: {message}", file=sys.stderr)

    for job in jobs:
        print(run_job(job, progress=print, note=note).markdown)


def _check_length(text: str) -> None:
    from posgen.perturbations.base import PerturbationError
    from posgen.perturbations.length import check_length_list

    try:
        check_length_list(text)
    except PerturbationError as e:
        raise InputError(f"--length: {e}") from None
