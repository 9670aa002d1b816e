"""What ``posgen check`` prints and writes: the per-cell table, the summary (verdicts,
draw noise, stated power) and the JUnit XML report carrying the same figures.

Every change, interval, margin and MDE is in its cell's unit
(:mod:`posgen.results.gate.margins`): ``% ratio`` (percent of the perplexity ratio
PPL_pert / PPL_base; the levels are that ratio, ``×``), ``points`` (accuracy points, the
levels the accuracy drop), ``nats/token`` (length excess past C).
"""

from __future__ import annotations

from typing import Any
from xml.sax.saxutils import quoteattr

from posgen.results.gate.baseline_file import KEY
from posgen.results.gate.check import cell_name

SHOWN = 8  # underpowered cells named in the summary before "and N more"


def _rate(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:g}"


def _interval(r: dict[str, Any]) -> str:
    return f"[{r['ci_lo']:+.2f}, {r['ci_hi']:+.2f}]"


def format_table(rows: list[dict[str, Any]], alpha: float) -> str:
    """One line per cell: levels, change [interval], margin, MDE (80 %), Holm p, verdict."""
    ci = f"{1 - 2 * alpha:.0%} interval"
    head = (
        f"{'task':<16} {'metric':<15} {'kind/scheme':<20} {'rate':>5} {'unit':<10} "
        f"{'baseline':>8} {'current':>8} {'change':>8} {ci:>18} {'margin':>7} "
        f"{'MDE80':>7} {'p (Holm)':>9}  verdict"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        lines.append(
            f"{r['task']:<16} {r['metric']:<15} {r['kind'] + '/' + r['scheme']:<20} "
            f"{_rate(r['rate']):>5} {r['unit']:<10} {_level(r, 'baseline'):>8} "
            f"{_level(r, 'current'):>8} "
            f"{r['change']:>+8.2f} {_interval(r):>18} {r['margin']:>7.3g} {r['mde']:>7.3g} "
            f"{r['p_holm']:>9.3g}  {verdict(r)}"
        )
    return "\n".join(lines)


def _level(r: dict[str, Any], which: str) -> str:
    x = r[which]
    return f"{x:.4f}x" if r["metric_kind"] == "perplexity" else f"{x:.3f}"


def verdict(r: dict[str, Any]) -> str:
    if r["failed"]:
        return "FAIL"
    return "ok (underpowered)" if r["powered"] is False else "ok"


def summary(rows: list[dict[str, Any]], info: dict[str, Any]) -> list[str]:
    """The lines under the table: verdicts, pairing, and which cells lack power.

    ``info``: model, baseline_model, alpha, statistic, draw (the draw settings that
    differ, allowed by --allow-other-seed), seeds."""
    m, failed = len(rows), sum(r["failed"] for r in rows)
    alpha = info["alpha"]
    out = [
        f"posgen check: {failed} of {m} cells worse than the baseline by more than their "
        f"margin ({info['model']} vs {info['baseline_model']}; statistic "
        f"{info['statistic']}; paired by document, Holm over {m} cells at alpha {alpha:g})"
    ]
    if info["draw"]:
        out.append(
            "  the runs differ in " + ", ".join(info["draw"]) + ": the comparison "
            "includes the perturbation draw's noise (--allow-other-seed); same-seed runs "
            "see identical perturbations and pair tighter"
        )
    else:
        out.append("  same seed and settings: both runs saw identical perturbations")
    out.append(
        f"  MDE80: the smallest true change failed with 80% power at each cell's n "
        f"documents and observed paired spread, testing at alpha/m = {alpha:g}/{m} "
        f"= {alpha / m:.2g} (Holm's first step)"
    )
    zero = sum(r["powered"] is None for r in rows)
    if zero:
        out.append(f"  {zero} cells have margin 0: they fail any measurable increase")
    weak = [r for r in rows if r["powered"] is False]
    if not weak:
        if zero < m:
            which = "every cell with a margin above 0" if zero else "every cell"
            out.append(f"  {which} catches a change of twice its margin with >= 80% power")
        return out
    out.append(
        f"  {len(weak)} of {m} cells cannot detect a change of their margin's size "
        "(twice the margin is caught with < 80% power):"
    )
    for r in weak[:SHOWN]:
        out.append("    " + power_note(r, info["seeds"]))
    if len(weak) > SHOWN:
        out.append(f"    and {len(weak) - SHOWN} more (see the table's MDE80 column)")
    return out


def power_note(r: dict[str, Any], seeds: int) -> str:
    """One underpowered cell: its MDE and the documents (or seeds) that would do."""
    name = cell_name(tuple(r[k] for k in KEY))
    need = r["docs_needed"]
    docs = f"about {need} documents" if need else "more documents than any suite holds"
    k = max(seeds, 1) * r["noise_ratio"] ** 2
    return (
        f"{name}: MDE80 {r['mde']:.3g} {r['unit']} vs margin {r['margin']:.3g} at "
        f"n = {r['n']}; needs {docs}, or about {k:.0f} seeds if the spread is draw noise"
    )


def junit_xml(rows: list[dict[str, Any]], info: dict[str, Any]) -> str:
    """A JUnit report: one testcase per cell (a failure when it fails), its figures as
    properties, the summary as the suite's system-out."""
    failures = sum(r["failed"] for r in rows)
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<testsuite name="posgen-gate" tests="{len(rows)}" failures="{failures}">',
    ]
    for r in rows:
        name = cell_name(tuple(r[k] for k in KEY))
        out.append(f'  <testcase classname="posgen.gate" name={quoteattr(name)}>')
        out.append("    <properties>")
        for key in ("unit", "baseline", "current", "change", "ci_lo", "ci_hi", "margin"):
            out.append(f"      <property name={quoteattr(key)} value={quoteattr(_v(r[key]))}/>")
        for key in ("mde", "powered", "docs_needed", "n", "p", "p_holm"):
            out.append(f"      <property name={quoteattr(key)} value={quoteattr(_v(r[key]))}/>")
        out.append("    </properties>")
        if r["failed"]:
            msg = (
                f"change {r['change']:+.3g} {r['unit']} {_interval(r)} exceeds the margin "
                f"{r['margin']:.3g} (baseline {r['baseline']:.3g}, current "
                f"{r['current']:.3g}; Holm p {r['p_holm']:.3g})"
            )
            out.append(f"    <failure message={quoteattr(msg)}/>")
        elif r["powered"] is False:
            out.append(f"    <system-out>{_escape(power_note(r, info['seeds']))}</system-out>")
        out.append("  </testcase>")
    text = "\n".join(summary(rows, info))
    out.append(f"  <system-out>{_escape(text)}</system-out>")
    out.append("</testsuite>")
    return "\n".join(out) + "\n"


def _v(x: Any) -> str:
    return f"{x:.6g}" if isinstance(x, float) else str(x)


def _escape(text: str) -> str:
    from xml.sax.saxutils import escape

    return escape(text)
