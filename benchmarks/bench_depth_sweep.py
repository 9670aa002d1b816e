"""The default evidence-depth sweep, timed whole, against the plain forwards it needs.

Two timings in one process, the plain one first:

1. plain: lm-eval's own ``hf`` model (no posgen on the model side), ``simple_evaluate`` of
   every forward the sweep needs, on the same documents: per built-in depth task its
   unmoved cell, its text-form cells ``perm_depth_<D>pct_<task>`` at the five default
   depths, and five more unmoved cells standing in for the position-form cells (the same
   tokens in the same order: only their position ids differ);
2. the sweep: ``posgen run --kinds depth`` (both forms, the five default depths, the four
   built-in tasks, 24 documents each: 44 cells), from the command's start to its report,
   the model load, scores and report included.

Printed: both wall times, their ratio, and the machine's load average before each (time
with nothing else running).

    python benchmarks/bench_depth_sweep.py [--model embedded] [--limit 24] [--out DIR]
"""

from __future__ import annotations

import argparse
import os
import shutil
import tempfile
import time
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)  # posgen run's default --depths


def plain_forwards(model: str, limit: int) -> float:
    """Wall seconds of lm-eval's ``hf`` over every forward the sweep needs."""
    import lm_eval
    from lm_eval.models.huggingface import HFLM

    from posgen.harness.embedded import resolve_pretrained
    from posgen.tasks import depth_suite
    from posgen.tasks.lm_eval_tasks import task_manager

    tm = task_manager()
    start = time.perf_counter()
    lm = HFLM(pretrained=resolve_pretrained(model), dtype="float32", device="cpu", batch_size=8)
    for task in depth_suite.TASKS:
        text = [f"perm_depth_{round(d * 100)}pct_{task}" for d in DEPTHS]
        for cell in [task, *text, *[task] * len(DEPTHS)]:
            lm_eval.simple_evaluate(
                model=lm, tasks=[cell], task_manager=tm, limit=limit, bootstrap_iters=0
            )
    return time.perf_counter() - start


def sweep(model: str, limit: int, out: Path) -> float:
    """Wall seconds of ``posgen run --kinds depth`` (its defaults) into ``out``."""
    from posgen.harness.cli import main

    start = time.perf_counter()
    args = ["run", "--model", model, "--kinds", "depth", "--limit", str(limit)]
    code = main([*args, "--no-progress", "--out", str(out)])
    if code != 0:
        raise SystemExit(f"posgen run --kinds depth exited {code}")
    return time.perf_counter() - start


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--limit", type=int, default=24, help="documents per task (24: all)")
    ap.add_argument("--out", type=Path, default=None, help="the sweep's run folder (kept)")
    args = ap.parse_args()
    out = args.out or Path(tempfile.mkdtemp(prefix="posgen-depth-sweep-")) / "run"
    if out.exists():
        shutil.rmtree(out)
    load_plain = os.getloadavg()[0]
    plain = plain_forwards(args.model, args.limit)
    load_sweep = os.getloadavg()[0]
    whole = sweep(args.model, args.limit, out)
    print(f"{args.model}, {args.limit} documents per task, {os.cpu_count()} CPUs")
    print(f"  plain forwards (lm-eval hf, 44 cells): {plain:7.1f} s  (load {load_plain:.1f})")
    print(f"  posgen run --kinds depth (44 cells):   {whole:7.1f} s  (load {load_sweep:.1f})")
    print(f"  ratio sweep / plain: {whole / plain:.2f}; run folder {out}")


if __name__ == "__main__":
    main()
