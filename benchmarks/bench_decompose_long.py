"""Benchmark of the decomposition at long windows: fit time / capture forward, extra peak memory.

For each window length n (default 1024 2048 4096 8192), one probe window of the embedded
SmolLM2-135M is decomposed in fresh child processes, side by side:

- ``forward``: the capture forward with an empty consumer (the baseline);
- ``new``: the streaming fit (structured causal layout, sums a block of query rows at a
  time): fit time = the consumer's time inside the forward + the batched solve after it;
- ``old`` (n ≤ ``--old-up-to``): the dense layout (pivoted Cholesky of the 2n × 2n Schur
  complement, built once per n; its build time is printed apart) fed with each layer's
  whole [H, n, n] logits, as the decomposition ran before the structured layout.

Printed per n: forward seconds, fit seconds and fit / forward (goal ≤ 0.5 at n = 4096),
and the extra peak resident memory of the fitting run over the empty-consumer run (peak
VmHWM minus the resident set just before the forward), and the whole run's peak (goal at
n = 8192: the whole decomposition within 10 minutes and 4 GB). The children run with
glibc's default allocator, as a user's process does; ``--trim-malloc`` lowers its mmap
threshold so freed blocks leave the resident set at once (the exact extra memory), at
the price of page-faulting every large temporary anew, which inflates the fit's seconds
(at n = 4096 on 2 idle cores: fit / forward 0.69 with it). Timings on a shared, loaded machine are
inflated by others' load: the ratios, measured in one run, are the figures to trust.

Usage: python benchmarks/bench_decompose_long.py [--tokens 1024 2048 4096 8192]
       [--old-up-to 2048] [--threads 2] [--trim-malloc]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path


def _vm(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _old_fitter(fitter_cls):
    """The decomposition before the structured layout: dense layout, whole logits."""
    import torch

    from posgen.harness.additive_fit.logit_fit import head_sums
    from posgen.harness.decomposition.qk_pattern import distance_sums
    from posgen.harness.decomposition.streaming_fit import _distance_axis
    from posgen.harness.decomposition.streaming_fit import _LayerSums as LayerSums

    class OldFitter(fitter_cls):
        build_s = 0.0

        def __call__(self, cap) -> None:
            attended = cap.attended[0, 0]
            t0 = time.perf_counter()
            layout = self.layouts.get(self.options.apply(attended), attended.device)
            self.build_s += time.perf_counter() - t0
            sums = head_sums(cap.logits[0], layout, dtype=torch.float32)
            d_sums = distance_sums(_distance_axis(cap, layout), layout)
            self._pending.append(LayerSums(cap.layer, layout, sums, d_sums, False))

    return OldFitter


def child(mode: str, n: int, threads: int) -> dict:
    import torch

    torch.set_num_threads(threads)
    from posgen.harness.additive_fit.logit_fit import FitOptions, LayoutCache
    from posgen.harness.decomposition import capture
    from posgen.harness.decomposition.capture import capture_forward
    from posgen.harness.decomposition.pipeline import load_model
    from posgen.harness.decomposition.probe import probe_token_windows
    from posgen.harness.decomposition.streaming_fit import LayerFitter

    model, tok = load_model("embedded", device="cpu")
    ids = probe_token_windows(tok, docs=1, tokens=n)[0]
    if mode == "old":
        capture.ATTENTION_BLOCK_BYTES = 2**62  # the whole eager attention, as before
        fitter = _old_fitter(LayerFitter)(FitOptions(), LayoutCache())
    else:
        fitter = LayerFitter(FitOptions(), LayoutCache())
    inside = [0.0]

    def consumer(cap) -> None:
        if mode == "forward":
            return
        t0 = time.perf_counter()
        fitter(cap)
        inside[0] += time.perf_counter() - t0

    base = _vm("VmRSS")
    t0 = time.perf_counter()
    capture_forward(model, ids, consumer)
    total = time.perf_counter() - t0
    t0 = time.perf_counter()
    fitter.finish()
    solve = time.perf_counter() - t0
    return {
        "mode": mode,
        "n": n,
        "forward_s": total - inside[0],
        "fit_s": inside[0] + solve,
        "solve_s": solve,
        "layout_build_s": getattr(fitter, "build_s", 0.0),
        "extra_peak_mib": (_vm("VmHWM") - base) / 2**20,
        "peak_mib": _vm("VmHWM") / 2**20,
        "mean_r_3axis": sum(r["r_3axis"] for r in fitter.rows) / max(len(fitter.rows), 1),
    }


def run_child(mode: str, n: int, threads: int, trim: bool = False) -> dict:
    env = dict(os.environ)
    if trim:  # freed blocks leave the resident set at once (exact extra memory, slower)
        env.update(MALLOC_MMAP_THRESHOLD_="65536", MALLOC_TRIM_THRESHOLD_="0")
    cmd = [sys.executable, __file__, "--child", mode, str(n), "--threads", str(threads)]
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"{mode} n={n} failed:\n{done.stderr[-2000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, nargs="+", default=[1024, 2048, 4096, 8192])
    parser.add_argument("--old-up-to", type=int, default=2048)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--trim-malloc",
        action="store_true",
        help="run the children with glibc's mmap threshold at 64 KiB and trimming at 0, so "
        "freed blocks leave the resident set at once: exact extra memory, but every large "
        "temporary is page-faulted anew (system time inflates the fit's seconds)",
    )
    parser.add_argument("--child", nargs=2, metavar=("MODE", "N"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args.threads)))
        return
    print(
        f"{'n':>6} {'layout':>6} {'forward s':>10} {'fit s':>8} {'fit/fwd':>8} "
        f"{'solve s':>8} {'build s':>8} {'extra MiB':>10} {'peak MiB':>9} {'mean r':>7}",
        flush=True,
    )
    for n in args.tokens:
        t0 = time.perf_counter()
        base = run_child("forward", n, args.threads, args.trim_malloc)
        modes = ["new", "old"] if n <= args.old_up_to else ["new"]
        for mode in modes:
            res = run_child(mode, n, args.threads, args.trim_malloc)
            extra = res["peak_mib"] - base["peak_mib"]
            print(
                f"{n:>6} {mode:>6} {res['forward_s']:>10.1f} {res['fit_s']:>8.1f} "
                f"{res['fit_s'] / res['forward_s']:>8.2f} {res['solve_s']:>8.2f} "
                f"{res['layout_build_s']:>8.1f} {extra:>10.0f} {res['peak_mib']:>9.0f} "
                f"{res['mean_r_3axis']:>7.4f}",
                flush=True,
            )
        print(
            f"{n:>6} {'(base)':>6} {base['forward_s']:>10.1f} {'':>8} {'':>8} {'':>8} {'':>8} "
            f"{'':>10} {base['peak_mib']:>9.0f}   (empty-consumer forward; all runs of this n "
            f"took {time.perf_counter() - t0:.0f} s)",
            flush=True,
        )


if __name__ == "__main__":
    main()
