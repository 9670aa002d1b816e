"""Coverage of the 95 % t interval of the excess over the in-distribution window, at the
document counts ``posgen length`` runs with (2: --quick, 5: the built-in documents).

Per document d and bucket, the excess is e_d = mean NLL(scheme) − mean NLL(window) over
the same tokens (every document has the same count in a full bucket, so the interval is
the paired t interval ē ± t_{.975, D−1} s / √D; posgen.results.scores.length.t_interval).
Simulated e_d: the per-document effect (normal N(.1, .05), or lognormal with mean .1 and
CV .5 or 1: a few documents dominate), plus the bucket's token noise, normal with s.d.
``--token-sd`` / √width (per-token NLL differences of s.d. ≈ 1 nat over 1024 tokens).
Prints the share of intervals holding the true mean .1.

    python benchmarks/sim_window_excess_coverage.py [--reps 4000]
"""

from __future__ import annotations

import argparse
import math

import numpy as np
from scipy import stats

SIZES = (2, 3, 5, 12)
EFFECTS = ("normal", "lognormal CV .5", "lognormal CV 1")
MEAN = 0.1


def effects(rng: np.random.Generator, kind: str, shape: tuple[int, int]) -> np.ndarray:
    """Per-document effects ``[reps, D]`` with mean :data:`MEAN`."""
    if kind == "normal":
        return rng.normal(MEAN, 0.05, shape)
    cv = 0.5 if "CV .5" in kind else 1.0
    s2 = math.log1p(cv * cv)
    return rng.lognormal(math.log(MEAN) - s2 / 2, math.sqrt(s2), shape)


def coverage(kind: str, d: int, reps: int, noise_sd: float, seed: int) -> float:
    """Share of ``reps`` t intervals over ``d`` documents that hold :data:`MEAN`."""
    rng = np.random.default_rng(seed)
    e = effects(rng, kind, (reps, d)) + rng.normal(0.0, noise_sd, (reps, d))
    half = stats.t.ppf(0.975, d - 1) * e.std(axis=1, ddof=1) / math.sqrt(d)
    mean = e.mean(axis=1)
    return float(((mean - half <= MEAN) & (mean + half >= MEAN)).mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--reps", type=int, default=4000)
    parser.add_argument("--token-sd", type=float, default=1.0)
    parser.add_argument("--width", type=int, default=1024)
    args = parser.parse_args()
    noise = args.token_sd / math.sqrt(args.width)
    se = math.sqrt(0.95 * 0.05 / args.reps)
    print(f"coverage of the 95% t interval, {args.reps} reps per cell (s.e. {se:.3f})")
    print(f"{'effect':<18}" + "".join(f"{'D = ' + str(d):>9}" for d in SIZES))
    for i, kind in enumerate(EFFECTS):
        cells = [coverage(kind, d, args.reps, noise, 10 * i + d) for d in SIZES]
        print(f"{kind:<18}" + "".join(f"{c:>9.3f}" for c in cells))


if __name__ == "__main__":
    main()
