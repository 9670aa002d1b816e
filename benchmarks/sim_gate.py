"""False alarms and power of ``posgen check`` (default margins, Holm) on simulated runs of
the default suite's sizes, under same-seed pairing and with a fresh draw.

Planted model (stated, not measured on a real model): prose has 12 documents with
w ~ U(150, 300) words and an unperturbed NLL per word ``b_d ~ N(3, .3)``; a document's
degradation (nats/word) in a cell is ``g_d = s_d · x + ε_d``, with ``s_d`` the document's
sensitivity (lognormal, mean 1, CV .5), ``x`` the rate (σ/4 for rope_noise) and ``ε_d ~
N(0, τ)`` the perturbation draw, τ = .03. Cloze has 48 documents, 80 % right
unperturbed; the draw turns a right answer wrong with probability ``min(1, x)``. Cells:
the default grid (text and position swap at .01 .02 .05 .1 .2 .5, rope_noise at σ .5 1
2) on both tasks' primary metric (30 cells), each task's unperturbed cell (2) and 4
length schemes of 5 documents (``e_ds ~ N(.3, .2)`` nats/token past C): 36 cells under
Holm.

Candidates (each against a baseline run of the model):

- (a) the same checkpoint rerun with the same seed: identical documents, perturbations
  and forward passes, so ``g`` is identical (δ ≡ 0);
- (b) a nearby checkpoint, same seed, true change inside the margins: every cell shifted
  by half its margin (in the cell's unit) plus per-document checkpoint noise ``η_d``
  sized so that the per-document correlation of ``g`` between the two runs is ρ
  (prose, unperturbed prose and length: ``η ~ N(0, sd(g) sqrt(1/ρ² - 1))``, ``sd(g)`` the
  cell's spread over documents; cloze: each document's outcome redrawn with probability
  1 - ρ);
- (c) power: (b) with one prose cell's true change set to exactly ``--plant`` (default 2)
  times its margin instead of half of it (each of the 15 prose cells in turn): the share
  of families in which that cell fails;
- a fresh draw (``--allow-other-seed``): the same checkpoint with new ``ε``.

    OMP_NUM_THREADS=1 python benchmarks/sim_gate.py [--reps 300] [--rho 0.9 0.99 0.999]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from posgen.results.gate.check import Margins, compare

RATES = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5)
SIGMAS = (0.5, 1.0, 2.0)
PROSE_DOCS, CLOZE_DOCS, LENGTH_DOCS = 12, 48, 5
LENGTH = ("none", "lambda:4,C", "scale:2", "yarn:2")
TAU = 0.03
MARGINS = Margins()


def grid():
    """(kind, rate, effective x) per cell."""
    out = [(k, r, r) for k in ("text", "position") for r in RATES]
    return out + [("feature", s, s / 4) for s in SIGMAS]


def model_docs(rng):
    s2 = math.log1p(0.25)
    return {
        "w": rng.uniform(150, 300, PROSE_DOCS),
        "s": rng.lognormal(-s2 / 2, math.sqrt(s2), PROSE_DOCS),
        "nll": rng.normal(3.0, 0.3, PROSE_DOCS),
        "right": (rng.random(CLOZE_DOCS) < 0.8).astype(float),
        "excess": rng.normal(0.3, 0.2, (len(LENGTH), LENGTH_DOCS)),
    }


def draw(rng, docs):
    """One perturbation draw (a seed): per cell, ε for prose and the flip pattern."""
    return [
        (rng.normal(0.0, TAU, PROSE_DOCS), rng.random(CLOZE_DOCS) < min(1.0, x))
        for _, _, x in grid()
    ]


def baseline_g(docs, eps):
    """Per cell (prose g, cloze g) of the model under draw ``eps``; the unperturbed
    (prose NLL per word, cloze score); then length g."""
    cells = [
        (docs["s"] * x + e, docs["right"] * flip)
        for (_, _, x), (e, flip) in zip(grid(), eps, strict=True)
    ]
    return cells, (docs["nll"].copy(), docs["right"].copy()), [r.copy() for r in docs["excess"]]


def _noisy(rng, g, k: float, shift: float):
    """``g + shift`` plus noise of ``k`` times its spread over documents (correlation ρ)."""
    return g + shift + rng.normal(0.0, k * max(g.std(ddof=1), 1e-12), g.size)


def nearby(rng, docs, g, rho: float, shift: float = 0.5, plant: int | None = None, times=2.0):
    """A nearby checkpoint's g under the same draw: ρ-correlated, shifted by ``shift``
    margins in every cell; ``plant``: the prose cell whose shift is ``times`` margins."""
    cells, (nll, score), length = g
    k = math.sqrt(1 / rho**2 - 1)
    out = []
    for i, (gp, gc) in enumerate(cells):
        m = times if i == plant else shift
        new_p = _noisy(rng, gp, k, math.log1p(m * MARGINS.perplexity / 100))  # % of the ratio
        redraw = rng.random(gc.size) < 1 - rho
        fresh = docs["right"] * (rng.random(gc.size) < gc.mean())  # same rate of drops
        new_c = np.where(redraw, fresh, gc)
        extra = rng.random(gc.size) < shift * MARGINS.accuracy / 100  # + half a margin
        out.append((new_p, np.maximum(new_c, extra * docs["right"])))
    base_nll = _noisy(rng, nll, k, math.log1p(shift * MARGINS.base_perplexity / 100))
    redraw = rng.random(score.size) < 1 - rho
    new_score = np.where(redraw, rng.random(score.size) < score.mean(), score)
    lost = rng.random(score.size) < shift * MARGINS.base_accuracy / 100  # half a margin
    base = (base_nll, np.where(lost, 0.0, new_score))
    dl = shift * MARGINS.length
    return out, base, [_noisy(rng, e, k, dl) for e in length]


def payload(docs, g):
    cells, (nll, score), length = g
    out = []
    for (kind, rate, _), (gp, gc) in zip(grid(), cells, strict=True):
        out.append(_cell("posgen_prose", "word_perplexity", kind, rate, docs["w"], gp))
        out.append(_cell("posgen_cloze", "acc", kind, rate, np.ones(CLOZE_DOCS), gc))
    base = [
        _base("posgen_prose", "word_perplexity", docs["w"], -nll),  # v: loglikelihood/word
        _base("posgen_cloze", "acc", np.ones(CLOZE_DOCS), score),
    ]
    keys = [f"l{i}" for i in range(LENGTH_DOCS)]
    lcells = [
        {"scheme": s, "excess": float(e.mean()), "docs": _docs(keys, [1024.0] * LENGTH_DOCS, e)}
        for s, e in zip(LENGTH, length, strict=True)
    ]
    return {
        "cells": out,
        "base": base,
        "length": {"settings": {"schemes": list(LENGTH)}, "cells": lcells},
    }


def _base(task, metric, w, v):
    keys = [f"d{i}" for i in range(w.size)]
    return {
        "task": task,
        "metric": metric,
        "lm_eval_key": f"{metric},none",
        "scale": _scale(metric),
        "larger_is_better": True,  # v: the loglikelihood per word, or the score
        "value": 0.0,
        "docs": {"keys": keys, "w": list(w), "v": list(v)},
    }


def _scale(metric: str) -> str:
    return "perplexity" if metric.endswith("perplexity") else "accuracy"


def _docs(keys, w, g):
    g = np.asarray(g, dtype=float)
    return {"keys": keys, "w": list(w), "g": g.tolist(), "g_worst": g.tolist()}


def _cell(task, metric, kind, rate, w, g):
    keys = [f"d{i}" for i in range(w.size)]
    return {
        "task": task,
        "metric": metric,
        "lm_eval_key": f"{metric},none",
        "scale": _scale(metric),
        "kind": kind,
        "scheme": "x",
        "rate": rate,
        "degradation": 0.0,
        "docs": _docs(keys, w.tolist(), g),
    }


def _rows(base, cand):
    return compare(base, cand, MARGINS, stated_power=False)


def family_rates(rho: float, reps: int, seed: int, times: float = 2.0) -> dict[str, float]:
    rng = np.random.default_rng(seed)
    prose = list(enumerate(grid()))  # every grid cell has a prose cell
    hits = {"a": 0, "b": 0, "fresh": 0}
    power, planted = np.zeros(len(prose)), np.zeros(len(prose))
    for rep in range(reps):
        docs = model_docs(rng)
        g = baseline_g(docs, draw(rng, docs))
        base = payload(docs, g)
        hits["a"] += any(r["failed"] for r in _rows(base, payload(docs, g)))
        hits["b"] += any(r["failed"] for r in _rows(base, payload(docs, nearby(rng, docs, g, rho))))
        fresh = payload(docs, baseline_g(docs, draw(rng, docs)))
        hits["fresh"] += any(r["failed"] for r in _rows(base, fresh))
        c = rep % len(prose)  # the planted cell, in turn
        i, (kind, rate, _) = prose[c]
        rows = _rows(base, payload(docs, nearby(rng, docs, g, rho, plant=i, times=times)))
        cell = [
            r for r in rows if (r["task"], r["kind"], r["rate"]) == ("posgen_prose", kind, rate)
        ]
        power[c] += cell[0]["failed"]
        planted[c] += 1
    per = power / planted  # each cell's share of the families it was planted in
    cells = {
        f"{kind}@{rate:g}": float(p) for (_, (kind, rate, _)), p in zip(prose, per, strict=True)
    }
    return {k: v / reps for k, v in hits.items()} | {
        "power_min": per.min(),
        "power": per.mean(),
        "cells": cells,
    }


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=300, help="families per ρ (a multiple of 15)")
    ap.add_argument("--rho", type=float, nargs="+", default=[0.9, 0.99, 0.999])
    ap.add_argument(
        "--plant", type=float, default=2.0, help="(c): the planted cell's change, in margins"
    )
    args = ap.parse_args()
    if args.reps < len(grid()):
        ap.error(f"--reps {args.reps}: give at least {len(grid())} (each prose cell planted once)")
    start = time.perf_counter()
    cells = len(grid()) * 2 + 2 + len(LENGTH)
    print(
        f"posgen check, default margins ({MARGINS.perplexity:g} % ratio, {MARGINS.accuracy:g} "
        f"points, {MARGINS.length:g} nats/token; unperturbed {MARGINS.base_perplexity:g} % "
        f"PPL, {MARGINS.base_accuracy:g} points), Holm over {cells} cells at alpha .05; "
        f"{args.reps} families per row"
    )
    power = f"(c) power {args.plant:g}x margin, prose: mean / min"
    print(
        f"{'rho':>5} {'(a) same ckpt+seed':>19} {'(b) nearby, 0.5 margin':>23} "
        f"{power:>39} {'fresh draw':>11}"
    )
    for rho in args.rho:
        r = family_rates(rho, args.reps, int(rho * 1000), args.plant)
        print(
            f"{rho:>5.3f} {r['a']:>19.3f} {r['b']:>23.3f} "
            f"{r['power']:>31.3f} / {r['power_min']:.3f} {r['fresh']:>11.3f}"
        )
        print(
            "      power per prose cell: "
            + ", ".join(f"{k} {v:.2f}" for k, v in r["cells"].items())
        )
    print(f"({time.perf_counter() - start:.0f} s on a shared, loaded machine)")


if __name__ == "__main__":
    main()
