"""Wall time of ``posgen length --quick`` against its 10-minute budget, and where it goes.

Runs the command as a user does (a fresh process, the embedded model already converted in
posgen's cache), into a new folder, and beside it, in the same run, the same schemes and
documents at F = 2 (``--documents 2 --factor 2 --schemes <--quick's>``), so the cost of
the shorter quick length is measured side by side, not remembered. Printed per command:
wall, CPU (user + system of the child), peak resident set of the child, and the seconds
the run's own records give per pass (the in-distribution window pass, each shared prefix
once, every scheme's forward or suffix), summed over documents; then the ratios
wall / 600 s and F = 2 / quick.

The machine must be otherwise idle: two cores shared with anything else give the other
process's time to this one (the load average before and after is printed).

    python benchmarks/bench_length_quick.py [--skip-f2] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import defaultdict
from pathlib import Path

BUDGET_S = 600.0


def run(argv: list[str], out: Path) -> dict:
    """One ``posgen length`` command into ``out``: wall, CPU and peak RSS of that child
    (its own rusage, from ``os.wait4``)."""
    log = out.with_suffix(".log")
    out.parent.mkdir(parents=True, exist_ok=True)
    command = [sys.executable, "-m", "posgen", "length", *argv, "--out", str(out)]
    with log.open("w") as sink:
        start = time.perf_counter()
        child = subprocess.Popen(command, stdout=sink, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(child.pid, 0)
        wall = time.perf_counter() - start
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode != 0:
        tail = log.read_text()[-3000:]
        raise SystemExit(f"posgen length {' '.join(argv)} exited {child.returncode}:\n{tail}")
    cpu = usage.ru_utime + usage.ru_stime
    return {"wall": wall, "cpu": cpu, "peak_gib": usage.ru_maxrss / 2**20, "out": out}


def passes(folder: Path) -> dict[str, float]:
    """Seconds per pass from the run's records: window, each distinct prefix once, schemes."""
    (model,) = [p for p in folder.iterdir() if (p / "config.json").is_file()] or [folder]
    seconds: dict[str, float] = defaultdict(float)
    prefixes: dict[tuple, float] = {}
    for record in sorted((model / "window").glob("*.json")):
        seconds["window pass"] += json.loads(record.read_text())["seconds"]
    for record in sorted((model / "docs").glob("*/*.json")):
        data = json.loads(record.read_text())
        seconds[data["scheme"]] += data["seconds"]
        if "prefix_seconds" in data:
            key = (record.name, tuple(data["prefix_shared_by"]))
            prefixes[key] = data["prefix_seconds"]
    if prefixes:
        seconds["shared prefix"] = sum(prefixes.values())
    return dict(seconds)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--skip-f2", action="store_true", help="time --quick alone")
    p.add_argument("--keep", type=Path, default=None, help="write the run folders here")
    args = p.parse_args()
    from posgen.harness.length.job import QUICK_DOCUMENTS, QUICK_FACTOR, QUICK_SCHEMES

    root = args.keep or Path(tempfile.mkdtemp(prefix="bench-length-quick-"))
    commands = {f"--quick (F = {QUICK_FACTOR:g})": ["--quick"]}
    if not args.skip_f2:
        same = ["--documents", str(QUICK_DOCUMENTS), "--schemes", QUICK_SCHEMES]
        commands["same schemes, F = 2"] = [*same, "--factor", "2"]
    print(f"load average before: {os.getloadavg()[0]:.2f}; cores: {os.cpu_count()}")
    results = {}
    for i, (name, argv) in enumerate(commands.items()):
        results[name] = run(argv, root / f"run{i}")
        r = results[name]
        print(
            f"\n{name}: wall {r['wall']:.1f} s ({r['wall'] / BUDGET_S:.2f} × the 600 s budget), "
            f"CPU {r['cpu']:.1f} s, peak RSS {r['peak_gib']:.2f} GiB"
        )
        for what, s in sorted(passes(r["out"]).items(), key=lambda kv: -kv[1]):
            print(f"  {what:<90} {s:7.1f} s  {s / r['wall']:5.1%} of wall")
    print(f"\nload average after: {os.getloadavg()[0]:.2f}")
    if len(results) == 2:
        quick, f2 = results.values()
        print(
            f"F = 2 / quick: wall {f2['wall'] / quick['wall']:.2f}×, CPU {f2['cpu'] / quick['cpu']:.2f}×"
        )


if __name__ == "__main__":
    main()
