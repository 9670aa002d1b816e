"""False-positive rate of the cross-model correlation test under independence.

For n = 3..10 models, fit quality x ~ U(.3, .9) and tolerance y ~ lognormal are drawn
independently (no relation). Prints, at α = .05, how often

- ``exact perm p``: the reported Spearman permutation p-value is <= .05,
- ``claim``: the report claims a relation (n >= 5 and that p <= .05),
- ``bootstrap CI``: the former 95 % percentile bootstrap interval over models excludes 0.

    OMP_NUM_THREADS=1 python benchmarks/sim_correlation_fpr.py [--reps 1000]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from scipy import stats

from posgen.results.scores.association import MIN_CLAIM, permutation_correlation


def bootstrap_excludes_zero(rng, x, y, iters: int = 500) -> bool:
    """The former method: percentile CI of Spearman over models resampled with replacement."""
    n = x.size
    idx = rng.integers(0, n, (iters, n))
    xs, ys = stats.rankdata(x[idx], axis=1), stats.rankdata(y[idx], axis=1)
    xc, yc = xs - xs.mean(1, keepdims=True), ys - ys.mean(1, keepdims=True)
    with np.errstate(invalid="ignore", divide="ignore"):
        r = (xc * yc).sum(1) / np.sqrt((xc * xc).sum(1) * (yc * yc).sum(1))
    r = r[np.isfinite(r)]
    if r.size == 0:
        return False
    lo, hi = np.quantile(r, [0.025, 0.975])
    return bool(lo > 0 or hi < 0)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=1000)
    args = ap.parse_args()
    start = time.perf_counter()
    se = math.sqrt(0.05 * 0.95 / args.reps)
    print(f"false-positive rate at alpha .05 under independence ({args.reps} reps, s.e. {se:.3f})")
    print(f"{'models':>6} {'exact perm p':>13} {'claim':>6} {'bootstrap CI (before)':>22}")
    for n in range(3, 11):
        rng = np.random.default_rng(n)
        perm = boot = 0
        for r in range(args.reps):
            x, y = rng.uniform(0.3, 0.9, n), rng.lognormal(0, 0.5, n)
            perm += permutation_correlation(x, y, "spearman", seed=r)["p"] <= 0.05
            boot += bootstrap_excludes_zero(rng, x, y)
        claim = perm if n >= MIN_CLAIM else 0
        print(
            f"{n:>6} {perm / args.reps:>13.3f} {claim / args.reps:>6.3f} {boot / args.reps:>22.3f}"
        )
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
