"""Line coverage of ``src/posgen`` per package, two coverage JSON reports side by side.

Each report is ``coverage json`` output (``pytest --cov=posgen --cov-report=json:PATH``).
A file's path is keyed from its ``posgen/`` on, so two checkouts in different folders
compare. A package's figure counts the files directly in it (``posgen/harness/length``
holds ``posgen/harness/length/*.py``, not its subpackages). Below the table, every line
covered in the first report and not in the second is listed per file: a change to the
tests that loses no covered line lists nothing.

    python benchmarks/coverage_by_package.py before.json after.json
    python benchmarks/coverage_by_package.py before.json after.json --depth 2
"""

from __future__ import annotations

import argparse
import json
from collections import defaultdict
from pathlib import PurePath


def _key(path: str) -> str:
    parts = PurePath(path).parts
    return "/".join(parts[len(parts) - 1 - parts[::-1].index("posgen") :])


def executed(report: str) -> dict[str, tuple[set[int], int]]:
    """``{posgen/...py: (executed lines, statements)}`` of one coverage JSON report."""
    with open(report, encoding="utf-8") as f:
        files = json.load(f)["files"]
    return {
        _key(path): (set(data["executed_lines"]), data["summary"]["num_statements"])
        for path, data in files.items()
    }


def package(key: str, depth: int | None) -> str:
    folder = key.rsplit("/", 1)[0]
    return folder if depth is None else "/".join(folder.split("/")[: depth + 1])


def table(before: dict, after: dict, depth: int | None) -> list[tuple[str, int, int, int]]:
    """``(package, statements, covered before, covered after)`` per package."""
    rows: dict[str, list[int]] = defaultdict(lambda: [0, 0, 0])
    for key in sorted(set(before) | set(after)):
        lines_b, statements = before.get(key, (set(), 0))
        lines_a, statements_a = after.get(key, (set(), statements))
        row = rows[package(key, depth)]
        row[0] += max(statements, statements_a)
        row[1] += len(lines_b)
        row[2] += len(lines_a)
    return [(name, *row) for name, row in sorted(rows.items())]


def _ranges(lines: list[int]) -> str:
    out, start = [], None
    for i, n in enumerate(lines):
        start = n if start is None else start
        if i + 1 == len(lines) or lines[i + 1] != n + 1:
            out.append(str(start) if start == n else f"{start}-{n}")
            start = None
    return ",".join(out)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("before")
    parser.add_argument("after")
    parser.add_argument("--depth", type=int, default=None, help="fold packages below it")
    args = parser.parse_args()
    before, after = executed(args.before), executed(args.after)
    rows = table(before, after, args.depth)
    width = max(len(r[0]) for r in rows)
    print(f"{'package':<{width}} {'stmts':>6} {'before':>14} {'after':>14} {'lost':>5}")
    totals = [0, 0, 0]
    for name, statements, cov_b, cov_a in rows:
        lost = sum(
            len(before[k][0] - after.get(k, (set(), 0))[0])
            for k in before
            if package(k, args.depth) == name
        )
        pct_b, pct_a = (100 * c / max(statements, 1) for c in (cov_b, cov_a))
        print(
            f"{name:<{width}} {statements:>6} {cov_b:>6} {pct_b:5.1f} % "
            f"{cov_a:>6} {pct_a:5.1f} % {lost:>5}"
        )
        totals = [t + x for t, x in zip(totals, (statements, cov_b, cov_a), strict=True)]
    statements, cov_b, cov_a = totals
    print(
        f"{'total':<{width}} {statements:>6} {cov_b:>6} {100 * cov_b / statements:5.1f} % "
        f"{cov_a:>6} {100 * cov_a / statements:5.1f} %"
    )
    lost = {k: sorted(v[0] - after.get(k, (set(), 0))[0]) for k, v in before.items()}
    lost = {k: v for k, v in lost.items() if v}
    print(f"\nlines covered before and not after: {sum(map(len, lost.values()))}")
    for key, lines in sorted(lost.items()):
        print(f"  {key}: {_ranges(lines)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
