"""Coverage of the 95 % degradation interval on simulated documents with known truth.

Documents: words w_d ~ U(150, 300), unperturbed NLL/word ~ N(3, 0.3), per-document effect
δ_d (nats/word) normal N(.1, .05) or lognormal with mean .1 and CV .5 or 1, plus, per
perturbation seed, a draw effect ε ~ N(0, .05). The truth is D = exp(E δ) - 1 (weights
independent of δ). Prints the share of intervals that contain it for n = 6, 12, 24, 48
documents, for the percentile paired bootstrap (the old method), log-t and boot-t, with
one seed per document and with K = 4 seeds averaged (``posgen run --seeds 4``).

    OMP_NUM_THREADS=1 python benchmarks/sim_interval_coverage.py [--reps 400]
"""

from __future__ import annotations

import argparse
import math
import time

import numpy as np

from posgen.results.scores.scoring import paired_bootstrap
from posgen.results.stats.intervals import ratio_interval

SIZES = (6, 12, 24, 48)
EFFECTS = ("normal", "lognormal CV .5", "lognormal CV 1")
MEAN, DRAW_SD = 0.1, 0.05


def effects(rng: np.random.Generator, kind: str, n: int) -> np.ndarray:
    if kind == "normal":
        return rng.normal(MEAN, 0.05, n)
    cv = 0.5 if "CV .5" in kind else 1.0
    s2 = math.log1p(cv * cv)
    return rng.lognormal(math.log(MEAN) - s2 / 2, math.sqrt(s2), n)


def documents(rng: np.random.Generator, kind: str, n: int, seeds: int):
    """(bll, w, pll averaged over seeds, w) for n documents."""
    w = rng.uniform(150, 300, n)
    base = rng.normal(3.0, 0.3, n)
    delta = effects(rng, kind, n)[:, None] + rng.normal(0, DRAW_SD, (n, seeds))
    pll = -((base[:, None] + delta) * w[:, None]).mean(axis=1)
    return -base * w, w, pll, w


def coverage(kind: str, n: int, seeds: int, reps: int, iters: int) -> dict[str, float]:
    truth = math.expm1(MEAN)
    rng = np.random.default_rng([n, seeds, EFFECTS.index(kind)])
    hits = {"percentile": 0, "log-t": 0, "boot-t": 0}
    for r in range(reps):
        a = documents(rng, kind, n, seeds)
        res = {
            "percentile": paired_bootstrap("perplexity", *a, iters=iters, seed=r),
            "log-t": ratio_interval(*a, method="log-t"),
            "boot-t": ratio_interval(*a, method="boot-t", iters=iters, seed=r),
        }
        for m, v in res.items():
            hits[m] += v["ci_lo"] <= truth <= v["ci_hi"]
    return {m: h / reps for m, h in hits.items()}


def real_cells(run: str, metric: str) -> dict[str, tuple[np.ndarray, ...]]:
    """``{cell name: (bll, bw, pll, pw)}`` for every perturbed ``metric`` cell of a run."""
    from posgen.results.folder.run_store import RunStore
    from posgen.results.tables.tidy import perdoc_rows

    perdoc = perdoc_rows(RunStore.open(run).read_cells())
    perdoc = perdoc[perdoc["metric"] == metric]
    out = {}
    keys = ["model", "task", "metric", "kind", "scheme", "rate", "seed"]
    for key, g in perdoc.groupby(keys, sort=True):
        cols = ("base_num", "base_den", "num", "den")
        out["/".join(map(str, key))] = tuple(g[c].to_numpy(np.float64) for c in cols)
    return out


def real_coverage(pool, n: int, reps: int, iters: int, seed: int) -> dict[str, float]:
    """Coverage when n documents are drawn with replacement from ``pool``."""
    bll, bw, pll, pw = pool
    truth = math.expm1(bll.sum() / bw.sum() - pll.sum() / pw.sum())  # L = r_p - r_b
    rng = np.random.default_rng(seed)
    hits = {"log-t": 0, "boot-t": 0}
    for r in range(reps):
        i = rng.integers(0, bll.size, n)
        a = [x[i] for x in pool]
        for m in hits:
            v = ratio_interval(*a, method=m, iters=iters, seed=r)
            hits[m] += v["ci_lo"] <= truth <= v["ci_hi"]
    return {m: h / reps for m, h in hits.items()}


def main_real(run: str, metric: str, reps: int, iters: int) -> None:
    cells = real_cells(run, metric)
    if not cells:
        raise SystemExit(f"{run}: no perturbed {metric} cells in its perdoc rows")
    sizes = sorted({len(p[0]) for p in cells.values()})
    print(f"\nreal effects: {len(cells)} {metric} cells of {run} (documents per cell: {sizes})")
    print(
        f"{'n':>3} {'log-t pooled':>13} {'worst cell':>11} {'boot-t pooled':>14} {'worst cell':>11}"
    )
    worst = {}
    for n in SIZES:
        cov = {k: real_coverage(p, n, reps, iters, seed=n) for k, p in cells.items()}
        lt = [c["log-t"] for c in cov.values()]
        bt = [c["boot-t"] for c in cov.values()]
        print(f"{n:>3} {np.mean(lt):>13.3f} {min(lt):>11.3f} {np.mean(bt):>14.3f} {min(bt):>11.3f}")
        worst[n] = min(cov, key=lambda k: cov[k]["log-t"])
    print(f"worst cell at n = 12 (log-t): {worst[12]}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=400)
    ap.add_argument("--iters", type=int, default=1999)
    ap.add_argument("--from-run", metavar="RUN", help="also check on a run's real effects")
    ap.add_argument("--metric", default="word_perplexity", help="--from-run cells' metric")
    ap.add_argument("--real-only", action="store_true", help="only the --from-run check")
    args = ap.parse_args()
    if args.real_only and not args.from_run:
        ap.error("--real-only needs --from-run RUN")
    start = time.perf_counter()
    se = math.sqrt(0.95 * 0.05 / args.reps)
    print(f"coverage of nominal 95% ({args.reps} reps, Monte Carlo s.e. {se:.3f})")
    if args.real_only:
        main_real(args.from_run, args.metric, args.reps, args.iters)
        print(f"({time.perf_counter() - start:.0f} s)")
        return
    print(f"{'effects':<16} {'seeds':>5} {'n':>3} {'percentile':>11} {'log-t':>7} {'boot-t':>7}")
    for kind in EFFECTS:
        for seeds in (1, 4):
            for n in SIZES:
                c = coverage(kind, n, seeds, args.reps, args.iters)
                print(
                    f"{kind:<16} {seeds:>5} {n:>3} {c['percentile']:>11.3f} "
                    f"{c['log-t']:>7.3f} {c['boot-t']:>7.3f}"
                )
    if args.from_run:
        main_real(args.from_run, args.metric, args.reps, args.iters)
    print(f"({time.perf_counter() - start:.0f} s)")


if __name__ == "__main__":
    main()
