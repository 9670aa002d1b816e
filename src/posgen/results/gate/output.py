"""What ``posgen check`` prints and writes: the per-cell table, the summary (verdicts,
draw noise, a candidate worse unperturbed, stated power) and the JUnit XML report
carrying the same figures.

Every change, interval, margin and MDE is in its cell's unit
(:mod:`posgen.results.gate.margins`): ``% ratio`` (percent of the perplexity ratio
PPL_pert / PPL_base; the levels are that ratio, ``×``), ``points`` (accuracy points; the
levels the accuracy drop, or the accuracy of an unperturbed cell), ``% PPL`` (percent
of the unperturbed perplexity, the levels that perplexity), ``nats/token`` (length
excess past C). The interval beside each verdict is Holm-adjusted, so it agrees with
the verdict; the JUnit XML also carries the unadjusted one.
"""

from __future__ import annotations

from typing import Any
from xml.sax.saxutils import quoteattr

from posgen.results.gate.baseline_file import KEY
from posgen.results.gate.check import cell_name
from posgen.results.gate.margins import format_level

SHOWN = 8  # cells named in a summary line before "and N more"
NO_POWER = "power cannot be estimated"
BLIND = ("underpowered", "unknown")  # power states of a cell that cannot see its margin
# posgen check's exit status, one meaning each (2: invalid input, set by the command)
EXIT = {"pass": 0, "regression": 1, "input": 2, "cannot detect margin": 3}
# why a lower level under perturbation is no better tolerance when the base got worse
BASE_REASON = {
    "perplexity": "the ratio PPL_pert/PPL_base falls when PPL_base rises",
    "accuracy": "a model that scores less unperturbed has less to lose",
}


def _rate(rate: float | None) -> str:
    return "-" if rate is None else f"{rate:g}"


def _interval(r: dict[str, Any], suffix: str = "") -> str:
    return f"[{r['ci_lo' + suffix]:+.2f}, {r['ci_hi' + suffix]:+.2f}]"


def _mde(r: dict[str, Any]) -> str:
    return "n/a" if r["mde"] is None else f"{r['mde']:.3g}"


def format_table(rows: list[dict[str, Any]], alpha: float) -> str:
    """One line per cell: levels, change [Holm interval], margin, MDE80, Holm p, verdict."""
    tw = max([16, *(len(str(r["task"])) for r in rows)])  # columns as wide as their names
    mw = max([15, *(len(str(r["metric"])) for r in rows)])
    head = (
        f"{'task':<{tw}} {'metric':<{mw}} {'kind/scheme':<20} {'rate':>5} {'unit':<10} "
        f"{'baseline':>9} {'current':>9} {'change':>8} {'interval (Holm)':>18} "
        f"{'margin':>7} {'MDE80':>7} {'p (Holm)':>9}  verdict"
    )
    lines = [head, "-" * len(head)]
    for r in rows:
        what = "unperturbed" if r["kind"] == "none" else f"{r['kind']}/{r['scheme']}"
        lines.append(
            f"{r['task']:<{tw}} {r['metric']:<{mw}} {what:<20} {_rate(r['rate']):>5} "
            f"{r['unit']:<10} {format_level(r['metric_kind'], r['baseline']):>9} "
            f"{format_level(r['metric_kind'], r['current']):>9} {r['change']:>+8.2f} "
            f"{_interval(r):>18} {r['margin']:>7.3g} {_mde(r):>7} {r['p_holm']:>9.3g}  "
            f"{verdict(r)}"
        )
    return "\n".join(lines)


def verdict(r: dict[str, Any]) -> str:
    if r["failed"]:
        return "FAIL"
    if r["power"] == "unknown":
        return f"ok ({NO_POWER})"
    return "ok (underpowered)" if r["power"] == "underpowered" else "ok"


def blind_cells(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The cells that cannot detect a change of their margin's size: underpowered (twice
    the margin caught with < 80 % power) or without a power estimate."""
    return [r for r in rows if r["power"] in BLIND]


def gate_verdict(rows: list[dict[str, Any]], require_power: bool) -> str:
    """A key of :data:`EXIT`: ``regression`` when any cell failed; else, with
    ``require_power``, ``cannot detect margin`` when any cell is blind to its margin;
    else ``pass``."""
    if any(r["failed"] for r in rows):
        return "regression"
    if require_power and blind_cells(rows):
        return "cannot detect margin"
    return "pass"


def require_power_lines(rows: list[dict[str, Any]]) -> list[str]:
    """What ``--require-power`` prints when it exits 3: each blind cell and the documents
    it needs (or why none can be named)."""
    blind = blind_cells(rows)
    out = [
        f"posgen check: could not detect its margin in {len(blind)} of {len(rows)} cells "
        f"and no cell failed: exit {EXIT['cannot detect margin']} (--require-power); "
        "rerun both the baseline and the candidate on more documents:"
    ]
    for r in blind:
        name = cell_name(tuple(r[k] for k in KEY))
        if r["power"] == "unknown":
            out.append(f"  {name}: {NO_POWER} (its paired differences do not vary)")
        elif r["docs_needed"]:
            out.append(f"  {name}: needs about {r['docs_needed']} documents (has {r['n']})")
        else:
            out.append(f"  {name}: more documents than any suite holds (has {r['n']})")
    return out


DEPTH_CELLS = (
    "  depth cells (scheme depth): each depth is a cell of its own, its rate column the "
    "evidence's depth D (not a rate): the change from the unmoved document with the "
    "evidence at D, against the baseline's at the same D"
)


def summary(rows: list[dict[str, Any]], info: dict[str, Any]) -> list[str]:
    """The lines under the table: verdicts, pairing, worse-at-base notes, the intervals,
    and which cells lack power or a power estimate.

    ``info``: model, baseline_model, alpha, statistic, draw (the draw settings that
    differ, allowed by --allow-other-seed), seeds, not_gated (the candidate's tasks whose
    primary metric the gate cannot test, with why)."""
    m, failed = len(rows), sum(r["failed"] for r in rows)
    alpha, blind = info["alpha"], len(blind_cells(rows))
    sight = f"; could not detect its margin in {blind} of {m} cells" if blind else ""
    out = [
        f"posgen check: {failed} of {m} cells worse than the baseline by more than their "
        f"margin{sight} ({info['model']} vs {info['baseline_model']}; statistic "
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
    out += base_notes(rows)
    if any(r.get("scheme") == "depth" for r in rows):
        out.append(DEPTH_CELLS)
    out += [
        f"  not gated: {n['task']} / {n['metric']}: {n['reason']}"
        for n in info.get("not_gated", ())
    ]
    out.append(
        f"  intervals: Holm-adjusted, each cell's two-sided 1 - 2*alpha/k interval (k its "
        f"Holm factor, 1 to {m}): a cell fails exactly when its lower end is above its "
        f"margin (the JUnit XML also has the unadjusted {1 - 2 * alpha:.0%} interval)"
    )
    out.append(
        f"  MDE80: the smallest true change failed with 80% power (exact noncentral t, "
        f"n-1 df) at each cell's n documents and observed paired spread, testing at "
        f"alpha/m = {alpha:g}/{m} = {alpha / m:.2g} (Holm's first step)"
    )
    return out + power_lines(rows, info)


def base_notes(rows: list[dict[str, Any]]) -> list[str]:
    """Per task whose unperturbed cell is shown worse (failed, or its interval above 0)
    while some of its perturbed cells degrade less than the baseline's (change below 0;
    how many of them are shown so, their interval below 0, is said)."""
    out = []
    for b in (r for r in rows if r["kind"] == "none"):
        if not (b["failed"] or b["ci_lo"] > 0):
            continue
        mine = [r for r in rows if r["task"] == b["task"] and r["kind"] not in ("none", "length")]
        better = [r for r in mine if r["change"] < 0]
        if not better:
            continue
        lo, hi = min(r["change"] for r in better), max(r["change"] for r in better)
        shown = sum(r["ci_hi"] < 0 for r in better)
        state = "FAIL" if b["failed"] else "within its margin"
        reason = BASE_REASON.get(better[0]["metric_kind"], "its level is relative to a worse base")
        out.append(
            f"  {b['task']}: more tolerant but worse at base: {len(better)} of {len(mine)} "
            f"perturbed cells degrade less than the baseline's ({lo:+.2f} to {hi:+.2f} "
            f"{better[0]['unit']}; {shown or 'none'} of them beyond noise, interval below 0), "
            f"while unperturbed {b['metric']} is {b['change']:+.2f} {b['unit']} worse "
            f"({state}); {reason}, so this is no better tolerance"
        )
    return out


def power_lines(rows: list[dict[str, Any]], info: dict[str, Any]) -> list[str]:
    """Margin-0 cells, cells without a power estimate, underpowered cells, or the claim
    for the cells that are powered."""
    m, out = len(rows), []
    zero = sum(r["margin"] == 0 for r in rows)
    if zero:
        out.append(f"  {zero} cells have margin 0: they fail any measurable increase")
    unknown = [r for r in rows if r["power"] == "unknown"]
    if unknown:
        out.append(
            f"  {len(unknown)} of {m} cells: {NO_POWER} (their paired differences do not "
            "vary: every document changed by the same amount, or all but one): " + _names(unknown)
        )
    weak = [r for r in rows if r["power"] == "underpowered"]
    powered = sum(r["power"] == "powered" for r in rows)
    if not weak:
        if powered == m:
            out.append("  every cell catches a change of twice its margin with >= 80% power")
        elif powered:
            which = "the other cell catches" if powered == 1 else f"the other {powered} cells catch"
            out.append(f"  {which} a change of twice the margin with >= 80% power")
        return out
    out.append(
        f"  {len(weak)} of {m} cells cannot detect a change of their margin's size "
        "(twice the margin is caught with < 80% power):"
    )
    for r in weak[:SHOWN]:
        out.append("    " + power_note(r, info))
    if len(weak) > SHOWN:
        out.append(f"    and {len(weak) - SHOWN} more (see the table's MDE80 column)")
    return out


def _names(rows: list[dict[str, Any]]) -> str:
    names = [cell_name(tuple(r[k] for k in KEY)) for r in rows]
    more = f" and {len(names) - SHOWN} more" if len(names) > SHOWN else ""
    return ", ".join(names[:SHOWN]) + more


def power_note(r: dict[str, Any], info: dict[str, Any]) -> str:
    """One underpowered cell: its MDE and the documents that would do; with other seeds
    than the baseline's (--allow-other-seed), the seeds that would if the spread is the
    draw's noise (same-seed draws cancel, so seeds cannot help there)."""
    name = cell_name(tuple(r[k] for k in KEY))
    need = r["docs_needed"]
    docs = f"about {need} documents" if need else "more documents than any suite holds"
    seeds = ""
    if info["draw"]:
        k = max(info["seeds"], 1) * r["noise_ratio"] ** 2
        seeds = f", or about {k:.0f} seeds if the spread is draw noise"
    return (
        f"{name}: MDE80 {r['mde']:.3g} {r['unit']} vs margin {r['margin']:.3g} at "
        f"n = {r['n']}; needs {docs}{seeds}"
    )


PROPERTIES = (
    "unit",
    "baseline",
    "current",
    "change",
    "ci_lo",
    "ci_hi",
    "holm_factor",
    "ci_lo_unadjusted",
    "ci_hi_unadjusted",
    "margin",
    "mde",
    "power",
    "docs_needed",
    "n",
    "p",
    "p_holm",
)


def junit_xml(rows: list[dict[str, Any]], info: dict[str, Any], require_power: bool = False) -> str:
    """A JUnit report: one testcase per cell (a failure when it fails), its figures as
    properties (``ci_lo``/``ci_hi``: the Holm-adjusted interval; ``*_unadjusted``: the
    ``1 - 2 alpha`` one; ``mde`` ``n/a`` where power cannot be estimated;
    ``detects_margin``), the summary as the suite's system-out, and the suite's
    ``verdict`` and ``exit_status`` (those of the command) as its properties. With
    ``require_power`` a cell blind to its margin that did not fail is an ``error``
    (the gate could not tell), counted in the suite's ``errors``."""
    failures = sum(r["failed"] for r in rows)
    verdict_ = gate_verdict(rows, require_power)
    errors = sum(not r["failed"] for r in blind_cells(rows)) if require_power else 0
    out = [
        '<?xml version="1.0" encoding="UTF-8"?>',
        f'<testsuite name="posgen-gate" tests="{len(rows)}" failures="{failures}" '
        f'errors="{errors}">',
        "  <properties>",
        f'    <property name="verdict" value={quoteattr(verdict_)}/>',
        f'    <property name="exit_status" value="{EXIT[verdict_]}"/>',
        f'    <property name="require_power" value="{str(require_power).lower()}"/>',
        f'    <property name="cells_blind_to_margin" value="{len(blind_cells(rows))}"/>',
        "  </properties>",
    ]
    for r in rows:
        out += _testcase(r, info, require_power)
    text = "\n".join(summary(rows, info))
    out.append(f"  <system-out>{_escape(text)}</system-out>")
    out.append("</testsuite>")
    return "\n".join(out) + "\n"


def _testcase(r: dict[str, Any], info: dict[str, Any], require_power: bool) -> list[str]:
    """One cell's ``testcase`` element, line by line (:func:`junit_xml`)."""
    name = cell_name(tuple(r[k] for k in KEY))
    out = [f'  <testcase classname="posgen.gate" name={quoteattr(name)}>', "    <properties>"]
    for key in PROPERTIES:
        out.append(f"      <property name={quoteattr(key)} value={quoteattr(_v(r[key]))}/>")
    sees = "n/a" if r["power"] == "no margin" else str(r["power"] not in BLIND).lower()
    out += [f'      <property name="detects_margin" value="{sees}"/>', "    </properties>"]
    if r["failed"]:
        msg = (
            f"change {r['change']:+.3g} {r['unit']}, Holm interval {_interval(r)} above "
            f"the margin {r['margin']:.3g} (baseline {r['baseline']:.4g}, current "
            f"{r['current']:.4g}; Holm p {r['p_holm']:.3g})"
        )
        out.append(f"    <failure message={quoteattr(msg)}/>")
    elif r["power"] in BLIND:
        message = _blind_message(r, info)
        if require_power:
            out.append(f'    <error type="cannot-detect-margin" message={quoteattr(message)}/>')
        out.append(f"    <system-out>{_escape(message)}</system-out>")
    return [*out, "  </testcase>"]


def _blind_message(r: dict[str, Any], info: dict[str, Any]) -> str:
    if r["power"] == "unknown":
        return f"{NO_POWER}: the paired differences do not vary"
    return power_note(r, info)


def _v(x: Any) -> str:
    if x is None:
        return "n/a"
    return f"{x:.6g}" if isinstance(x, float) else str(x)


def _escape(text: str) -> str:
    from xml.sax.saxutils import escape

    return escape(text)
