"""``posgen check RUN --baseline FILE``: the CI gate; exit 0 pass, 1 a measured regression,
2 invalid input, 3 (only with ``--require-power``) no regression measured but some cell
could not detect a change of its margin's size (see :mod:`posgen.results.gate.check`,
:data:`posgen.results.gate.output.EXIT`)."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from posgen.results.gate.baseline_file import GateInputError

# per kind of gate cell: the metavar and help of its margin flag
HELPS = {
    "perplexity": (
        "PCT",
        "perturbed perplexity cells: percent of the perplexity ratio PPL_pert/PPL_base by "
        "which the candidate's may exceed the baseline's (1.50x -> 1.53x is 2)",
    ),
    "accuracy": ("POINTS", "perturbed accuracy cells: accuracy points of extra drop"),
    "length": (
        "NATS",
        "length cells: nats per token of extra NLL excess past the trained context",
    ),
    "base_perplexity": (
        "PCT",
        "unperturbed perplexity cells: percent by which the candidate's perplexity "
        "may exceed the baseline's (445.6 -> 450.1 is 1)",
    ),
    "base_accuracy": ("POINTS", "unperturbed accuracy cells: accuracy points lost"),
}


def configure_parser(parser: argparse.ArgumentParser) -> None:
    from posgen.results.gate.margins import FLAGS, Margins

    d = Margins()
    parser.add_argument("run", type=Path, help="run folder to check")
    parser.add_argument("--baseline", type=Path, required=True, help="file from `posgen baseline`")
    parser.add_argument(
        "--model", help="model label in the run (default: its only non-random-init model)"
    )
    margins = parser.add_argument_group(
        "margins: the regression allowed per cell, in each metric's unit (a cell fails "
        "only when the data show it worse than the baseline by more than its margin)"
    )
    for kind, flag in FLAGS.items():
        metavar, text = HELPS[kind]
        default = d.of(kind)
        margins.add_argument(
            flag, type=float, default=default, metavar=metavar, help=f"{text}; default {default:g}"
        )
    margins.add_argument(
        "--tolerance",
        type=float,
        help="removed: it applied one number in three units; use --margin-ppl, "
        "--margin-acc and --margin-length (passing it exits 2)",
    )
    parser.add_argument(
        "--alpha",
        type=float,
        default=0.05,
        help="family-wise false-alarm rate over all cells (Holm); default 0.05",
    )
    parser.add_argument(
        "--statistic",
        default="mean",
        help="per document: 'mean' over the run's perturbation seeds (default) or "
        "'worst' (its largest degradation over them; with --seeds K > 1)",
    )
    parser.add_argument(
        "--allow-other-seed",
        action="store_true",
        help="compare a run whose --seed or --seeds differ from the baseline's (the "
        "comparison then includes the perturbation draw's noise); the CI recipe reruns "
        "with the baseline's seed instead",
    )
    parser.add_argument("--junit-xml", type=Path, help="also write a JUnit XML report here")
    parser.add_argument(
        "--require-power",
        action="store_true",
        help="exit 3 (not 0) when no cell failed but some cell cannot detect a change of "
        "its margin's size (twice the margin caught with < 80%% power, or no power "
        "estimate): 'could not tell' is not 'no regression'; names the documents each needs",
    )


def _writable(path: Path | None) -> None:
    if path is None:
        return
    parent = path.parent if str(path.parent) else Path(".")
    if path.is_dir() or not parent.is_dir() or not os.access(parent, os.W_OK):
        raise GateInputError(
            f"--junit-xml {path}: cannot write there (no such folder, or not writable)"
        )


def _options(args: argparse.Namespace):
    """The margins, checked before anything is read (GateInputError)."""
    from posgen.results.gate.check import check_options
    from posgen.results.gate.margins import FLAGS, Margins

    if args.tolerance is not None:
        raise GateInputError(
            "--tolerance was removed: it applied one number in three units. Give the "
            "margins in each metric's unit: --margin-ppl (percent of the perplexity "
            "ratio PPL_pert/PPL_base), --margin-acc (accuracy points), --margin-length "
            "(nats per token)"
        )
    check_options(args.alpha, args.statistic)
    return Margins(**{kind: getattr(args, _dest(flag)) for kind, flag in FLAGS.items()})


def _dest(flag: str) -> str:
    return flag.lstrip("-").replace("-", "_")


def _gate(args: argparse.Namespace) -> tuple[list, dict]:
    """The compared cells and the summary's info; writes the JUnit XML where asked."""
    from posgen.results.folder.folder_kind import require_folder
    from posgen.results.folder.store import atomic_write_text
    from posgen.results.gate.check import compare, gate_payload, load_baseline
    from posgen.results.gate.output import junit_xml
    from posgen.results.gate.pairing import check_pairing

    margins = _options(args)
    _writable(args.junit_xml)
    require_folder(args.run, "run", "posgen check")
    baseline = load_baseline(args.baseline)
    current = gate_payload(args.run, args.model)
    draw = check_pairing(baseline["pairing"], current["pairing"], args.allow_other_seed)
    rows = compare(baseline, current, margins, args.alpha, args.statistic)
    info = {
        "model": current["model"],
        "baseline_model": baseline["model"],
        "alpha": args.alpha,
        "statistic": args.statistic,
        "draw": draw,
        "seeds": current["pairing"]["seeds"],
        "not_gated": current["not_gated"],
    }
    if args.junit_xml:
        atomic_write_text(args.junit_xml, junit_xml(rows, info, args.require_power))
    return rows, info


def main(args: argparse.Namespace) -> int:
    from posgen.results.folder.schema import SchemaError
    from posgen.results.gate.output import (
        EXIT,
        format_table,
        gate_verdict,
        require_power_lines,
        summary,
    )

    try:
        rows, info = _gate(args)
    except (GateInputError, SchemaError, OSError) as e:
        print(f"posgen check: {e}", file=sys.stderr)
        return EXIT["input"]
    except Exception as e:  # exit 1 means a measured regression, never a crash on input
        print(
            f"posgen check: could not read the run or baseline ({type(e).__name__}: {e}); "
            "not a regression: fix the input (or report this error)",
            file=sys.stderr,
        )
        return EXIT["input"]
    print(format_table(rows, args.alpha))
    print()
    print("\n".join(summary(rows, info)))
    verdict = gate_verdict(rows, args.require_power)
    if verdict == "cannot detect margin":
        print()
        print("\n".join(require_power_lines(rows)))
    return EXIT[verdict]
