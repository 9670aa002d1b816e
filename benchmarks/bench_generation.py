"""Benchmark: whole-process wall time of generation under ``hf-posgen`` over plain ``hf``.

Each variant is one fresh ``lm_eval`` process (the console script of this environment:
imports, model load, the task, generation, writing nothing) on the same small
``generate_until`` task: plain ``hf``, ``hf-posgen`` identity (``positions=swap:0``) and
``hf-posgen positions=swap:0.2`` (and any ``--extra`` model args), interleaved over
``--repeats`` rounds after one warm-up round; the figure per variant is its fastest round
(the least disturbed by other load), and the ratio is over plain ``hf``'s. The
process's CPU time (user + system) is printed beside its wall time: on a shared machine
it is the steadier figure. Goals: identity ≤ 1.05, ``swap:0.2`` ≤ 1.10.

The task is written to a temporary folder unless ``--task``/``--include-path`` name one:
passages of the Britannica article posgen ships, the model asked to continue each for
exactly ``--new-tokens`` tokens (``min_new_tokens`` = ``max_gen_toks``, and a stop
sequence that cannot occur), so every variant generates the same number of tokens
whatever it generates.

Usage: python benchmarks/bench_generation.py [--pretrained embedded] [--docs 16]
       [--new-tokens 32] [--batch-size 4] [--repeats 3] [--device cpu]
       [--extra features=qk_noise:0.1] [--task NAME --include-path DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TASK = "posgen_bench_generation"


def write_task(root: Path, docs: int, new_tokens: int) -> None:
    """A generate_until task of ``docs`` passages of about 60 words each."""
    from posgen.tasks.corpora import britannica_paragraphs

    passages = [" ".join(p.split()[:60]) for p in britannica_paragraphs()[:docs]]
    if len(passages) < docs:
        raise SystemExit(f"--docs {docs}: the article has {len(passages)} passages")
    data = root / "docs.jsonl"
    data.write_text("".join(json.dumps({"text": p, "next": ""}) + "\n" for p in passages))
    (root / f"{TASK}.yaml").write_text(
        f"task: {TASK}\ndataset_path: json\ndataset_kwargs:\n  data_files:\n"
        f"    test: {data}\ntest_split: test\noutput_type: generate_until\n"
        'doc_to_text: "{{text}}"\ndoc_to_target: "{{next}}"\n'
        f"generation_kwargs:\n  until: ['<<posgen: no stop>>']\n"
        f"  max_gen_toks: {new_tokens}\n  min_new_tokens: {new_tokens}\n  do_sample: false\n"
        "metric_list:\n  - metric: exact_match\n"
        "    aggregation: mean\n    higher_is_better: true\n"
    )


def command(lm_eval: str, args: argparse.Namespace, model: str, extra: str) -> list[str]:
    model_args = f"pretrained={args.path},dtype=float32" + (f",{extra}" if extra else "")
    return [
        lm_eval,
        "--model",
        model,
        "--model_args",
        model_args,
        "--tasks",
        args.task,
        "--include_path",
        str(args.include_path),
        "--batch_size",
        str(args.batch_size),
        "--device",
        args.device,
    ]


def timed(argv: list[str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds: user + system) of one process; its output is shown
    only when it fails."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    done = subprocess.run(argv, capture_output=True, text=True, env=env, check=False)
    elapsed = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    if done.returncode:
        sys.stderr.write(done.stdout[-3000:] + done.stderr[-3000:])
        raise SystemExit(f"failed ({done.returncode}): {' '.join(argv)}")
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return elapsed, cpu


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pretrained", default="embedded")
    ap.add_argument("--docs", type=int, default=16)
    ap.add_argument("--new-tokens", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--extra", action="append", default=[], help="more hf-posgen model args")
    ap.add_argument("--task", default=TASK)
    ap.add_argument("--include-path", type=Path)
    args = ap.parse_args()

    from posgen.harness.embedded import resolve_pretrained

    lm_eval = shutil.which("lm_eval", path=os.path.dirname(sys.executable))
    if lm_eval is None:
        raise SystemExit("the lm_eval console script is not installed next to this Python")
    args.path = resolve_pretrained(args.pretrained)
    with tempfile.TemporaryDirectory(prefix="posgen-bench-gen-") as tmp:
        if args.include_path is None:
            args.include_path = Path(tmp)
            write_task(args.include_path, args.docs, args.new_tokens)
        variants = [
            ("hf", "hf", ""),
            ("hf-posgen positions=swap:0", "hf-posgen", "positions=swap:0"),
        ]
        variants.append(("hf-posgen positions=swap:0.2", "hf-posgen", "positions=swap:0.2"))
        variants += [(f"hf-posgen {e}", "hf-posgen", e) for e in args.extra]
        times: dict[str, list[tuple[float, float]]] = {label: [] for label, _, _ in variants}
        for round_ in range(args.repeats + 1):
            for label, model, extra in variants:
                elapsed = timed(command(lm_eval, args, model, extra))
                if round_:
                    times[label].append(elapsed)
    print(
        f"task={args.task} docs={args.docs} new_tokens={args.new_tokens} model={args.path} "
        f"batch_size={args.batch_size} device={args.device} rounds={args.repeats} "
        "(fastest; whole lm_eval process each)"
    )
    from bench_model_perturbations import print_ratios  # this folder: the script's own

    print_ratios(times, width=40, digits=2)


if __name__ == "__main__":
    main()
