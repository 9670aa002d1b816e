"""False-positive rate of the within-model layer relation test (``posgen layers``).

Null: the sensitivity profile ``s`` and the covariate ``q`` over ``L`` layers are
independent, each autocorrelated along depth: a stationary AR(1) ``x_ℓ = φ x_{ℓ-1} + e_ℓ``
(``x_0 ~ N(0, 1/(1-φ²))``), φ from 0 (independent layers) to .9 (smooth profiles), plus
a lognormal variant (skewed values). Prints, per (L, φ), the share of replications with
p ≤ .05 for the dihedral shift permutation p that posgen reports
(:func:`posgen.results.scores.layers.shift_test`) and, for comparison, scipy's
Spearman p that treats layers as independent.

Columns: the levels test (mirror-ring shifts), the same test on first differences
(``changes``), both at once (posgen's verdict: an association is reported only when
levels and changes agree), and scipy's Spearman p that treats layers as independent.
A last block gives each profile its own linear trend with depth (slope ~ N(0, 1) over
the stack, AR(1) φ = .5 noise): independent, but a trend is not stationary, so the
levels null holds only approximately there; differencing removes the trends.

    OMP_NUM_THREADS=1 python benchmarks/sim_layer_relation.py [--reps 2000]
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from posgen.results.scores.layers import change_test, naive_spearman_p, shift_test

LAYERS = (12, 24, 30)
PHIS = (0.0, 0.5, 0.8, 0.9)


def ar1(rng: np.random.Generator, n: int, phi: float) -> np.ndarray:
    x = np.empty(n)
    x[0] = rng.normal() / np.sqrt(1 - phi**2)
    for i in range(1, n):
        x[i] = phi * x[i - 1] + rng.normal()
    return x


def rates(rng, reps: int, n: int, draw) -> tuple[float, ...]:
    """Shares of p <= .05: levels, changes, both (posgen's verdict), naive."""
    hits = np.zeros(4)
    for _ in range(reps):
        s, q = draw(rng, n), draw(rng, n)
        levels = shift_test(s, q)["p"] <= 0.05
        changes = change_test(s, q)["p"] <= 0.05
        hits += (levels, changes, levels and changes, naive_spearman_p(s, q) <= 0.05)
    return tuple(hits / reps)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--reps", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    se = np.sqrt(0.05 * 0.95 / args.reps)
    print(f"false-positive rate at alpha .05, {args.reps} reps per row (s.e. ~{se:.3f})")
    print("| profile | L | phi | levels (mirror shift) | changes | both | naive Spearman |")
    print("|---|---|---|---|---|---|---|")
    for n in LAYERS:
        for phi in PHIS:
            row = rates(rng, args.reps, n, lambda r, m, phi=phi: ar1(r, m, phi))
            print(f"| AR(1) | {n} | {phi} | " + " | ".join(f"{v:.3f}" for v in row) + " |")
        row = rates(rng, args.reps, n, lambda r, m: np.exp(ar1(r, m, 0.8)))
        print(f"| lognormal AR(1) | {n} | 0.8 | " + " | ".join(f"{v:.3f}" for v in row) + " |")
    for n in LAYERS:

        def trended(r, m):
            return r.normal() * np.linspace(0, 3, m) + ar1(r, m, 0.5)

        row = rates(rng, args.reps, n, trended)
        print(f"| own trend + AR(1) | {n} | 0.5 | " + " | ".join(f"{v:.3f}" for v in row) + " |")
    print(f"{time.perf_counter() - start:.1f} s")


if __name__ == "__main__":
    main()
