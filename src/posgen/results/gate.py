"""The CI regression gate: ``posgen baseline`` and ``posgen check``.

``posgen baseline RUN -o FILE`` stores one model's degradation at every configured rate
(with its bootstrap stderr and CI) and its tolerance figures, as versioned JSON.
``posgen check RUN --baseline FILE`` compares a new run of (a new checkpoint of) the
model against it. For every (task, metric, kind, scheme, rate) of the baseline:

    worse  =  D_run - D_base                      (D: degradation, > 0 is worse)
    margin =  max(tolerance, z * sqrt(se_run^2 + se_base^2))
    FAIL   if worse > margin

Exit status: 0 when nothing fails, 1 when something does, 2 on invalid input (missing
or corrupt baseline, another suite, other rates, no such model) with a message.
"""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any
from xml.sax.saxutils import quoteattr

BASELINE_KIND = "posgen-baseline"
BASELINE_VERSION = 1
KEY = ("task", "metric", "kind", "scheme", "rate")


class GateInputError(ValueError):
    """Invalid input to the gate (exit status 2)."""


def configure_baseline_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", type=Path, help="run folder written by `posgen run`")
    parser.add_argument("-o", "--output", type=Path, required=True, help="baseline JSON to write")
    parser.add_argument(
        "--model", help="model label in the run (default: its only non-random-init model)"
    )


def configure_check_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run", type=Path, help="run folder to check")
    parser.add_argument("--baseline", type=Path, required=True, help="file from `posgen baseline`")
    parser.add_argument(
        "--model", help="model label in the run (default: its only non-random-init model)"
    )
    parser.add_argument(
        "--tolerance",
        type=float,
        default=0.02,
        help="absolute margin on the degradation (relative PPL increase or "
        "accuracy drop); default 0.02",
    )
    parser.add_argument(
        "--z", type=float, default=3.0, help="margin in combined standard errors; default 3"
    )
    parser.add_argument("--junit-xml", type=Path, help="also write a JUnit XML report here")


def baseline_payload(run_dir: Path, model: str | None = None) -> dict[str, Any]:
    """The baseline of one model of a run (scores recomputed from the run's cells)."""
    from posgen import __version__
    from posgen.results.report import load_scores

    store, scores = load_scores(run_dir)
    model = pick_model(store, scores, model)
    degr = scores["degradation"]
    degr = degr[degr["model"] == model]
    tol = scores["tolerance"]
    tol = tol[tol["model"] == model]
    cols = [*KEY, "degradation", "stderr", "ci_lo", "ci_hi", "n"]
    return {
        "kind": BASELINE_KIND,
        "baseline_version": BASELINE_VERSION,
        "posgen_version": __version__,
        "run": str(run_dir),
        "model": model,
        "config_hash": store.config_hash,
        "suite": suite_of(store.config),
        "scoring": store.config.get("scoring", {}),
        "entries": _records(degr[cols]),
        "tolerance": _records(tol.drop(columns=["model"])),
    }


def pick_model(store, scores: dict[str, Any], model: str | None) -> str:
    models = sorted(set(scores["degradation"]["model"]))
    if model is not None:
        if model not in models:
            raise GateInputError(f"model {model!r} is not in {store.root}; it has {models}")
        return model
    real = [m for m in models if m not in random_init_models(store.config)]
    if len(real) != 1:
        raise GateInputError(f"{store.root} holds models {models}: name one with --model")
    return real[0]


def random_init_models(config: dict[str, Any]) -> set[str]:
    return {m["label"] for m in config.get("models", []) if m.get("random_init")}


def suite_of(config: dict[str, Any]) -> dict[str, Any]:
    """What must match between a baseline and a checked run."""
    return {"suite": config.get("suite"), "tasks": config.get("tasks")}


def _records(df) -> list[dict[str, Any]]:
    out = []
    for rec in df.to_dict(orient="records"):
        out.append(
            {
                k: (None if isinstance(v, float) and not math.isfinite(v) else v)
                for k, v in rec.items()
            }
        )
    return out


def load_baseline(path: Path) -> dict[str, Any]:
    from posgen.results.schema import SchemaError
    from posgen.results.store import read_json

    try:
        data = read_json(path, "baseline")
    except SchemaError as e:
        raise GateInputError(str(e)) from None
    if data.get("kind") != BASELINE_KIND:
        raise GateInputError(
            f"{path} is not a posgen baseline (write one with `posgen baseline RUN -o FILE`)"
        )
    if data.get("baseline_version") != BASELINE_VERSION:
        raise GateInputError(
            f"{path} has baseline_version {data.get('baseline_version')!r}; "
            f"this posgen reads {BASELINE_VERSION}: regenerate it"
        )
    entries = data.get("entries")
    if (
        not isinstance(entries, list)
        or not entries
        or not all(
            isinstance(e, dict) and all(k in e for k in (*KEY, "degradation", "stderr"))
            for e in entries
        )
    ):
        raise GateInputError(f"{path} is corrupt: 'entries' must list degradations")
    return data


def compare(
    baseline: dict[str, Any], current: list[dict[str, Any]], tolerance: float, z: float
) -> list[dict[str, Any]]:
    """One row per baseline entry: both degradations, the margin and the verdict."""
    if tolerance < 0 or z < 0 or not math.isfinite(tolerance) or not math.isfinite(z):
        raise GateInputError("--tolerance and --z must be finite numbers >= 0")
    now = {tuple(e[k] for k in KEY): e for e in current}
    base = {tuple(e[k] for k in KEY): e for e in baseline["entries"]}
    if set(now) != set(base):
        missing = sorted(set(base) - set(now), key=str)[:4]
        extra = sorted(set(now) - set(base), key=str)[:4]
        raise GateInputError(
            "the run and the baseline do not cover the same (task, metric, "
            f"kind, scheme, rate) cells: missing {missing}, extra {extra}; "
            "rerun with the baseline's settings or make a new baseline"
        )
    rows = []
    for key in sorted(base, key=str):
        b, c = base[key], now[key]
        se = math.hypot(_num(b["stderr"]), _num(c["stderr"]))
        margin = max(tolerance, z * se)
        worse = c["degradation"] - b["degradation"]
        rows.append(
            {
                **dict(zip(KEY, key, strict=True)),
                "baseline": b["degradation"],
                "current": c["degradation"],
                "worse_by": worse,
                "margin": margin,
                "failed": bool(worse > margin),
            }
        )
    return rows


def _num(x: Any) -> float:
    return 0.0 if x is None or not math.isfinite(float(x)) else float(x)


def format_table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"{'task':<22} {'metric':<16} {'kind/scheme':<20} {'rate':>6} {'baseline':>9} "
        f"{'current':>9} {'worse by':>9} {'margin':>8}  verdict"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['task']:<22} {r['metric']:<16} {r['kind'] + '/' + r['scheme']:<20} "
            f"{r['rate']:>6g} {r['baseline']:>9.4f} {r['current']:>9.4f} "
            f"{r['worse_by']:>+9.4f} {r['margin']:>8.4f}  "
            f"{'FAIL' if r['failed'] else 'ok'}"
        )
    return "\n".join(lines)


def junit_xml(rows: list[dict[str, Any]]) -> str:
    failures = sum(r["failed"] for r in rows)
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<testsuite name="posgen-gate" tests="{len(rows)}" failures="{failures}">',
    ]
    for r in rows:
        name = f"{r['task']}/{r['metric']}/{r['kind']}/{r['scheme']}@{r['rate']:g}"
        out.append(f'  <testcase classname="posgen.gate" name={quoteattr(name)}>')
        if r["failed"]:
            msg = (
                f"degradation {r['current']:.4f} vs baseline {r['baseline']:.4f}: worse "
                f"by {r['worse_by']:.4f} > margin {r['margin']:.4f}"
            )
            out.append(f"    <failure message={quoteattr(msg)}/>")
        out.append("  </testcase>")
    out.append("</testsuite>")
    return "\n".join(out) + "\n"


def main_baseline(args: argparse.Namespace) -> int:
    from posgen.results.schema import SchemaError
    from posgen.results.store import atomic_write_json

    try:
        payload = baseline_payload(args.run, args.model)
    except (GateInputError, SchemaError) as e:
        print(f"posgen baseline: {e}", file=sys.stderr)
        return 2
    atomic_write_json(args.output, payload)
    print(
        f"posgen baseline: {len(payload['entries'])} degradations of {payload['model']} "
        f"written to {args.output}"
    )
    return 0


def main_check(args: argparse.Namespace) -> int:
    from posgen.results.schema import SchemaError
    from posgen.results.store import atomic_write_text

    try:
        baseline = load_baseline(args.baseline)
        current = baseline_payload(args.run, args.model)
        if current["suite"] != baseline["suite"]:
            raise GateInputError(
                f"suite mismatch: baseline {baseline['suite']}, run {current['suite']}"
            )
        rows = compare(baseline, current["entries"], args.tolerance, args.z)
    except (GateInputError, SchemaError) as e:
        print(f"posgen check: {e}", file=sys.stderr)
        return 2
    print(format_table(rows))
    failed = sum(r["failed"] for r in rows)
    if args.junit_xml:
        atomic_write_text(args.junit_xml, junit_xml(rows))
    print(
        f"\nposgen check: {failed} of {len(rows)} degradations worse than the baseline "
        f"({current['model']} vs {baseline['model']}; tolerance {args.tolerance}, z {args.z})"
    )
    return 1 if failed else 0
