"""False alarms and detection of ``posgen check`` on simulated runs of the suite's sizes.

Planted model (stated, not measured on a real model): prose has n documents with
w ~ U(150, 300) words; a document's degradation (nats/word) in a cell is
``s_d · x + ε``, with ``s_d`` the document's sensitivity (lognormal, mean 1, CV .5,
the same in every run of the model), ``x`` the rate (σ/4 for rope_noise) and ``ε ~
N(0, τ)`` the perturbation draw of that run. Cloze has 48 documents, 80 % answered
right unperturbed; in a cell a right answer turns wrong with probability ``min(1, x)``.
Cells: the default grid (text and position swap at .01 .02 .05 .1 .2 .5, rope_noise at
σ .5 1 2) on both tasks' primary metric, 30 cells; or the slow test's grid (6 prose
documents, swap .05 and σ 1, 3 cells).

- same-model rerun: the same ``s_d``, a new draw (another perturbation seed);
- weakened model (the slow test's): position rates and σ doubled, text unchanged;
- one-cell drop: +0.04 nats/word on every document of one prose cell.

Length cells (``posgen run --length``'s default: 5 documents, 4 schemes): a document's
NLL excess past C under a scheme is ``e_ds + ε`` (nats per token, 1024 tokens past C),
``e_ds`` fixed for the model (N(0.3, 0.2)), ``ε ~ N(0, τ)`` the run's noise (a length
run of the same checkpoint is deterministic, so this τ stands for a retrained
checkpoint of the same quality); they join the default grid's Holm family (34 cells).
A length drop: +0.05 nats/token on every document of one scheme.

τ = .015 is τ = .03 with ``posgen run --seeds 4`` (each document averages 4 draws).

    OMP_NUM_THREADS=1 python benchmarks/sim_gate.py [--reps 300]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from posgen.results.gate.check import compare

DEFAULT = {
    "rates": (0.01, 0.02, 0.05, 0.1, 0.2, 0.5),
    "sigmas": (0.5, 1.0, 2.0),
    "docs": 12,
    "length": ("none", "lambda:4,C", "scale:2", "yarn:2"),
}
SLOW_TEST = {"rates": (0.05,), "sigmas": (1.0,), "docs": 6, "length": ()}
LENGTH_DOCS = 5


def grid(spec, weakened: bool):
    """(kind, rate, effective x) per cell."""
    k = 2.0 if weakened else 1.0
    out = [("text", r, r) for r in spec["rates"]]
    out += [("position", r, min(k * r, 1.0)) for r in spec["rates"]]
    return out + [("feature", s, k * s / 4) for s in spec["sigmas"]]


def run(rng, docs, spec, tau, weakened=False, drop=0.0, cloze=True, length_drop=0.0):
    """One run's gate payload."""
    w, s, right, excess = docs
    cells = []
    for i, (kind, rate, x) in enumerate(grid(spec, weakened)):
        g = s * x + rng.normal(0.0, tau, w.size) + (drop if i == 0 else 0.0)
        cells.append(_cell("posgen_prose", "word_perplexity", kind, rate, w, g))
        if cloze:
            flip = rng.random(right.size) < min(1.0, x)
            cells.append(
                _cell("posgen_cloze", "acc", kind, rate, np.ones(right.size), right * flip)
            )
    return {
        "suite": "s",
        "limits": "l",
        "cells": cells,
        "length": _length(rng, spec, excess, tau, length_drop),
    }


def _length(rng, spec, excess, tau, drop):
    """The length section: per scheme, each document's excess past C plus this run's noise."""
    if not spec["length"]:
        return None
    keys = [f"l{i}" for i in range(LENGTH_DOCS)]
    cells = []
    for i, scheme in enumerate(spec["length"]):
        g = excess[i] + rng.normal(0.0, tau, LENGTH_DOCS) + (drop if i == 1 else 0.0)
        docs = {"keys": keys, "w": [1024.0] * LENGTH_DOCS, "g": g.tolist()}
        cells.append({"scheme": scheme, "excess": float(g.mean()), "docs": docs})
    return {"settings": {"schemes": list(spec["length"])}, "cells": cells}


def _cell(task, metric, kind, rate, w, g):
    keys = [f"d{i}" for i in range(w.size)]
    docs = {"keys": keys, "w": w.tolist(), "g": g.astype(float).tolist()}
    return {
        "task": task,
        "metric": metric,
        "kind": kind,
        "scheme": "x",
        "rate": rate,
        "degradation": float((w * g).sum() / w.sum()),
        "docs": docs,
    }


def _any_fail(base, cand) -> bool:
    return any(r["failed"] for r in compare(base, cand))


def rates(spec, tau, reps, seed, cloze=True):
    rng = np.random.default_rng(seed)
    fa = weak = one = length = 0
    for _ in range(reps):
        n = spec["docs"]
        s2 = math.log1p(0.25)
        docs = (
            rng.uniform(150, 300, n),
            rng.lognormal(-s2 / 2, math.sqrt(s2), n),
            (rng.random(48) < 0.8).astype(float),
            rng.normal(0.3, 0.2, (len(spec["length"]), LENGTH_DOCS)),
        )
        base = run(rng, docs, spec, tau, cloze=cloze)
        fa += _any_fail(base, run(rng, docs, spec, tau, cloze=cloze))
        weak += _any_fail(base, run(rng, docs, spec, tau, weakened=True, cloze=cloze))
        rows = compare(base, run(rng, docs, spec, tau, drop=0.04, cloze=cloze))
        one += next(
            r
            for r in rows
            if r["task"] == "posgen_prose" and r["kind"] == "text" and r["rate"] == spec["rates"][0]
        )["failed"]
        if spec["length"]:
            rows = compare(base, run(rng, docs, spec, tau, cloze=cloze, length_drop=0.05))
            length += next(r for r in rows if r["scheme"] == spec["length"][1])["failed"]
    return fa / reps, weak / reps, one / reps, (length / reps if spec["length"] else None)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=300)
    args = ap.parse_args()
    start = time.perf_counter()
    print(f"posgen check on simulated runs ({args.reps} families per row; alpha .05, Holm)")
    head = f"{'grid':<28} {'tau':>5} {'false alarm':>12} {'weakened caught':>16} {'+.04 cell':>10}"
    print(f"{head} {'+.05 length':>12}")
    for name, spec, cloze in (
        ("default (34 cells, 12 docs)", DEFAULT, True),
        ("slow test (3 cells, 6 docs)", SLOW_TEST, False),
    ):
        for tau in (0.015, 0.03, 0.05):
            fa, weak, one, length = rates(spec, tau, args.reps, int(tau * 1000), cloze)
            tail = "-" if length is None else f"{length:.3f}"
            print(f"{name:<28} {tau:>5.3f} {fa:>12.3f} {weak:>16.3f} {one:>10.3f} {tail:>12}")
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
