"""Coverage of the 95 % interval of the middle-versus-ends gap, on simulated documents.

The gap ``m(.5) - (m(0) + m(1)) / 2`` is taken from per-document gaps
(:func:`posgen.results.scores.depth.paired_difference`). Documents d = 1..n, depths
0, .5, 1:

- continuous (a gold value's NLL, nats): ``m_d(D) = b_d + u_d s(D) + e_dD`` with doc
  difficulty ``b_d ~ N(5, 1)``, a U-shaped depth effect ``s = (0, 2, 1)`` nats at
  (0, .5, 1) scaled per document by ``u_d`` (normal N(1, .5), or lognormal with mean 1 and
  CV 1: a few documents carry most of the effect), noise ``e ~ N(0, 1)`` or Student t
  with 3 d.f. (heavy tails). The truth is ``1.5 · E u = 1.5``; a null case has ``s = 0``.
- 0/1 (accuracy): ``P(correct_d at D) = Φ(a_d + μ_D)``, document ability ``a_d ~ N(0, 1)``
  (so the depths of one document are correlated), answers independent given ``a_d``. The
  truth is ``Φ(μ_.5/√2) - (Φ(μ_0/√2) + Φ(μ_1/√2)) / 2``.

Prints, per case and method, the share of intervals that hold the truth at n = 12, 24,
48: posgen's choice (paired t for continuous, Agresti–Min with fractional counts for 0/1)
beside the paired t on 0/1 documents for comparison.

    OMP_NUM_THREADS=1 python benchmarks/sim_depth_gap.py [--reps 500]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np
from scipy import stats

from posgen.results.scores.depth import paired_difference

SIZES = (12, 24, 48)
CONTINUOUS = {
    "normal u, normal noise": ("normal", "normal", 1.0),
    "lognormal u (CV 1), normal noise": ("lognormal", "normal", 1.0),
    "normal u, t3 noise": ("normal", "t3", 1.0),
    "null (no depth effect), t3 noise": ("normal", "t3", 0.0),
}
BINARY = {  # μ at depths 0, .5, 1
    "accuracy .9 / .7 / .85": (1.8, 0.74, 1.46),
    "accuracy .6 / .4 / .55": (0.36, -0.36, 0.18),
    "accuracy .98 / .9 / .98 (near the ceiling)": (2.9, 1.8, 2.9),
    "accuracy .95 at every depth (null)": (2.33, 2.33, 2.33),
    "accuracy .5 at every depth (null)": (0.0, 0.0, 0.0),
}


def continuous_docs(rng: np.random.Generator, case: tuple, n: int) -> tuple[np.ndarray, float]:
    """``[3, n]`` NLLs at depths 0, .5, 1, and the true gap."""
    u_kind, noise, scale = case
    if u_kind == "normal":
        u = rng.normal(1.0, 0.5, n)
    else:
        s2 = math.log(2.0)  # CV 1
        u = rng.lognormal(-s2 / 2, math.sqrt(s2), n)
    shape = scale * np.array([0.0, 2.0, 1.0])
    e = rng.normal(0, 1, (3, n)) if noise == "normal" else rng.standard_t(3, (3, n))
    m = rng.normal(5, 1, n) + shape[:, None] * u + e
    return m, float(shape[1] - (shape[0] + shape[2]) / 2)


def binary_docs(rng: np.random.Generator, mu: tuple, n: int) -> tuple[np.ndarray, float]:
    a = rng.normal(0, 1, n)
    p = stats.norm.cdf(a[None, :] + np.array(mu)[:, None])
    m = (rng.uniform(size=(3, n)) < p).astype(float)
    q = stats.norm.cdf(np.array(mu) / math.sqrt(2))
    return m, float(q[1] - (q[0] + q[2]) / 2)


def covered(m: np.ndarray, truth: float, binary: bool) -> bool:
    r = paired_difference(m[1], (m[0] + m[2]) / 2, binary)
    return bool(r["ci_lo"] <= truth <= r["ci_hi"])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--reps", type=int, default=500)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    start = time.perf_counter()
    print(f"coverage of the 95 % gap interval, {args.reps} reps per cell")
    print(f"| metric | case | interval | {' | '.join(f'n={n}' for n in SIZES)} |")
    print(f"|---|---|---|{'---|' * len(SIZES)}")
    for name, case in CONTINUOUS.items():
        cov = [
            np.mean([covered(*continuous_docs(rng, case, n), False) for _ in range(args.reps)])
            for n in SIZES
        ]
        print(f"| NLL | {name} | paired t | {' | '.join(f'{c:.3f}' for c in cov)} |")
    for name, mu in BINARY.items():
        for method, binary in (("Agresti–Min (fractional)", True), ("paired t", False)):
            cov = [
                np.mean([covered(*binary_docs(rng, mu, n), binary) for _ in range(args.reps)])
                for n in SIZES
            ]
            print(f"| 0/1 | {name} | {method} | {' | '.join(f'{c:.3f}' for c in cov)} |")
    print(f"({time.perf_counter() - start:.1f} s)")


if __name__ == "__main__":
    main()
