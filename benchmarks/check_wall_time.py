"""Wall time of ``posgen check`` on one run folder, for two source trees (before and
after a change), interleaved so that a shared machine's load falls on both alike.

Each tree writes its own baseline of the run first (``posgen baseline``: baseline files
are versioned, so each tree reads its own), then ``posgen check RUN --baseline FILE`` runs
``--reps`` times per tree, alternating; printed: min and median seconds per tree, and
the exit status (0 or 1: a gate verdict; anything else stops the benchmark).

    python benchmarks/check_wall_time.py RUN --before OLD_CHECKOUT/src \\
        --after src [--reps 5] [--work /tmp/check-wall-time]
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path


def posgen(src: Path, *argv: str) -> tuple[float, int]:
    env = dict(os.environ, PYTHONPATH=str(src.resolve()))
    start = time.perf_counter()
    res = subprocess.run([sys.executable, "-m", "posgen", *argv], env=env, capture_output=True)
    seconds = time.perf_counter() - start
    if res.returncode not in (0, 1):
        raise SystemExit(f"posgen {' '.join(argv)} exited {res.returncode}:\n{res.stderr[-2000:]}")
    return seconds, res.returncode


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("run", type=Path, help="a finished run folder")
    p.add_argument("--before", type=Path, required=True, help="src/ of the tree before")
    p.add_argument("--after", type=Path, required=True, help="src/ of the tree after")
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--work", type=Path, default=Path("/tmp/check-wall-time"))
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    trees = {"before": args.before, "after": args.after}
    baselines = {name: args.work / f"baseline-{name}.json" for name in trees}
    for name, src in trees.items():
        posgen(src, "baseline", str(args.run), "-o", str(baselines[name]))
    times: dict[str, list[float]] = {name: [] for name in trees}
    codes: dict[str, int] = {}
    for _ in range(args.reps):
        for name, src in trees.items():
            seconds, codes[name] = posgen(
                src, "check", str(args.run), "--baseline", str(baselines[name])
            )
            times[name].append(seconds)
    for name, t in times.items():
        print(
            f"{name}: min {min(t):.2f} s, median {statistics.median(t):.2f} s over "
            f"{args.reps} runs of posgen check {args.run} (exit {codes[name]})"
        )


if __name__ == "__main__":
    main()
