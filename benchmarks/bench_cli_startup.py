"""How long the command line takes to answer --help and to refuse bad arguments.

Each command runs in a fresh interpreter, as a user types it (the ``posgen`` console
script of this environment); the median of ``--repeats`` runs is printed beside a bare
``python -c pass`` measured in the same loop. Goal: every line <= 0.5 s on 2 cores.
The ``--suite`` line reads the on-disk index of lm-eval task names (built once, on the
first check after an install; the warm-up run below builds it). The last line is the
same refusal right after an install (a fresh ``POSGEN_CACHE``, no index): the name is
looked for in lm-eval's task files without building the index (outside the goal: it
reads about 15,000 files).
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

GOAL_S = 0.5


def commands(posgen: str) -> list[tuple[str, list[str]]]:
    from posgen.harness.cli import COMMANDS

    out = [("posgen --help", [posgen, "--help"])]
    out += [(f"posgen {c} --help", [posgen, c, "--help"]) for c in COMMANDS]
    out += [
        ("posgen run --suite nosuch (refused)", [posgen, "run", "--suite", "nosuch"]),
        ("posgen run --seeds 0 (refused)", [posgen, "run", "--seeds", "0"]),
        ("posgen check (missing --baseline)", [posgen, "check", "RUN"]),
        ("posgen report (no such folder)", [posgen, "report", "/nonexistent/run"]),
    ]
    return out


def timed(argv: list[str], env: dict[str, str] | None = None) -> float:
    t = time.perf_counter()
    subprocess.run(argv, capture_output=True, check=False, env=env)
    return time.perf_counter() - t


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    posgen = shutil.which("posgen", path=str(Path(sys.executable).parent)) or "posgen"
    rows = commands(posgen)
    timed(rows[-4][1])  # warm-up: builds the task index if this install has none
    bare = statistics.median(timed([sys.executable, "-c", "pass"]) for _ in range(args.repeats))
    print(f"{'command':44} {'median s':>9} {'vs python':>10}  goal <= {GOAL_S} s")
    worst = 0.0
    for label, argv in rows:
        t = statistics.median(timed(argv) for _ in range(args.repeats))
        worst = max(worst, t)
        print(f"{label:44} {t:9.3f} {t / bare:9.1f}x  {'ok' if t <= GOAL_S else 'OVER'}")
    print(f"{'python -c pass':44} {bare:9.3f}")
    print(f"slowest: {worst:.3f} s ({'met' if worst <= GOAL_S else 'NOT met'})")
    with tempfile.TemporaryDirectory() as fresh:  # no task index: as right after an install
        env = {**os.environ, "POSGEN_CACHE": fresh}
        argv = [posgen, "run", "--suite", "nosuch"]
        t = statistics.median(timed(argv, env) for _ in range(args.repeats))
        print(f"{'posgen run --suite nosuch (no index yet)':44} {t:9.3f} {t / bare:9.1f}x")
    return 0


if __name__ == "__main__":
    sys.exit(main())
