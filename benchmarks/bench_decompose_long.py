"""Benchmark of the decomposition at long windows: the capture forward beside the plain sdpa
forward, the fit beside both, and the peak memory of ``posgen length --decompose``.

For each window length n (default 1024 2048 4096 8192), one probe window of the embedded
SmolLM2-135M runs in fresh child processes, side by side:

- ``sdpa``: the plain decoder forward as ``posgen length`` scores a document
  (``model.base_model``, no mask: sdpa's causal kernel), the baseline;
- ``capture``: the capture forward with an empty consumer (the model's own sdpa outputs,
  each layer's q/k handed over);
- ``fit``: the capture forward with the streaming fit (sums from q/k during the forward,
  the batched solve after it), with the past-context split at n/2: its forward seconds
  (the consumer's time taken out), the fit seconds (the consumer's time + the solve);
- ``old`` (n ≤ ``--old-up-to``): the dense layout (pivoted Cholesky of the 2n × 2n Schur
  complement, built once per n; its build time printed apart) fed with each layer's whole
  [H, n, n] logits, as the decomposition ran before the structured layout.

Printed per run: wall and CPU seconds (user + system, all threads), each divided by the
sdpa forward's (goal: the capture forward ≤ 1.5 × sdpa at n = 4096 and 8192), the fit's
seconds, the minor page faults, the peak resident set (VmHWM) and the mean r. On a
shared, loaded machine wall seconds are inflated by others' load: the CPU ratios,
measured in one run, are the figures to trust there.

``--length-decompose N`` instead runs the whole ``posgen length --documents 1 --schemes
none --decompose --max-length N --trained-context N/2`` (the first built-in document; at
N = 16384 that is the embedded model's own C = 8192) in a child and prints its wall and
CPU time, page faults and peak resident set (goal at 16384: within 4 GB).

Usage: python benchmarks/bench_decompose_long.py [--tokens 1024 2048 4096 8192]
       [--old-up-to 2048] [--threads 2] [--trim-malloc]
       python benchmarks/bench_decompose_long.py --length-decompose 16384
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
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


class _Clock:
    """Wall and CPU seconds (user + system, this process) and minor faults since start."""

    def __init__(self) -> None:
        self.wall, self.cpu, self.faults = time.perf_counter(), _cpu(), _faults()

    def read(self) -> tuple[float, float, int]:
        return time.perf_counter() - self.wall, _cpu() - self.cpu, _faults() - self.faults


def _cpu() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _faults() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def child(mode: str, n: int, threads: int) -> dict:
    import torch

    torch.set_num_threads(threads)
    from posgen.harness.additive_fit.logit_fit import FitOptions, LayoutCache
    from posgen.harness.decomposition.pipeline import load_model
    from posgen.harness.decomposition.probe import probe_token_windows
    from posgen.harness.decomposition.streaming_fit import LayerFitter
    from posgen.harness.model_side.logits.capture import capture_forward

    model, tok = load_model("embedded", device="cpu")
    ids = probe_token_windows(tok, docs=1, tokens=n)[0]
    if mode == "old":
        fitter = _old_fitter(LayerFitter)(FitOptions(), LayoutCache())
    else:
        fitter = LayerFitter(FitOptions(), LayoutCache(), context=n // 2)
    inside = [0.0, 0.0]  # the consumer's wall, CPU seconds

    def consumer(cap) -> None:
        if mode == "capture":
            return
        clock = _Clock()
        fitter(cap)
        wall, cpu, _ = clock.read()
        inside[0] += wall
        inside[1] += cpu

    base = _vm("VmRSS")
    clock = _Clock()
    if mode == "sdpa":
        with torch.no_grad():
            model.base_model(input_ids=torch.tensor([ids]))
    else:
        capture_forward(model, ids, consumer)
    wall, cpu, faults = clock.read()
    solve = _Clock()
    fitter.finish()
    solve_wall, solve_cpu, solve_faults = solve.read()
    return {
        "mode": mode,
        "n": n,
        "forward_s": wall - inside[0],
        "forward_cpu_s": cpu - inside[1],
        "fit_s": inside[0] + solve_wall,
        "fit_cpu_s": inside[1] + solve_cpu,
        "faults": faults + solve_faults,
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


def length_decompose(n: int) -> None:
    """Run ``posgen length --decompose`` on one document of n tokens; print its costs."""
    with tempfile.TemporaryDirectory() as out:
        cmd = [sys.executable, "-m", "posgen", "length", "--documents", "1", "--schemes", "none"]
        cmd += ["--decompose", "--max-length", str(n), "--trained-context", str(n // 2)]
        cmd += ["--out", str(Path(out) / "run")]
        print(" ".join(cmd[1:]), flush=True)
        start = time.perf_counter()
        proc = subprocess.Popen(cmd)  # its own lines: seconds per NLL pass and per fit
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
    if os.waitstatus_to_exitcode(status) != 0:
        raise RuntimeError(f"posgen length exited {os.waitstatus_to_exitcode(status)}")
    print(
        f"n = {n}: wall {wall:.0f} s, CPU {usage.ru_utime:.0f} s user + {usage.ru_stime:.0f} s "
        f"system, {usage.ru_minflt} minor page faults, peak resident set "
        f"{usage.ru_maxrss / 2**20:.2f} GiB ({usage.ru_maxrss} kB)",
        flush=True,
    )


HEADER = (
    f"{'n':>6} {'run':>8} {'wall s':>8} {'CPU s':>8} {'wall/sdpa':>9} {'CPU/sdpa':>8} "
    f"{'fit s':>7} {'fit CPU':>7} {'faults':>9} {'build s':>7} {'peak MiB':>9} {'mean r':>7}"
)


def _row(res: dict, sdpa: dict) -> str:
    fitted = res["mode"] in ("fit", "old")
    fit = f"{res['fit_s']:>7.1f} {res['fit_cpu_s']:>7.1f}" if fitted else f"{'':>7} {'':>7}"
    build = f"{res['layout_build_s']:>7.1f}" if res["mode"] == "old" else f"{'':>7}"
    r = f"{res['mean_r_3axis']:>7.4f}" if fitted else ""
    return (
        f"{res['n']:>6} {res['mode']:>8} {res['forward_s']:>8.1f} {res['forward_cpu_s']:>8.1f} "
        f"{res['forward_s'] / sdpa['forward_s']:>9.2f} "
        f"{res['forward_cpu_s'] / sdpa['forward_cpu_s']:>8.2f} {fit} {res['faults']:>9} "
        f"{build} {res['peak_mib']:>9.0f} {r}"
    )


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
        "temporary is page-faulted anew (system time inflates the seconds)",
    )
    parser.add_argument(
        "--length-decompose",
        type=int,
        metavar="N",
        help="run posgen length --decompose on one document of N tokens instead",
    )
    parser.add_argument("--child", nargs=2, metavar=("MODE", "N"))
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args.threads)))
        return
    if args.length_decompose:
        length_decompose(args.length_decompose)
        return
    print(HEADER, flush=True)
    for n in args.tokens:
        t0 = time.perf_counter()
        sdpa = run_child("sdpa", n, args.threads, args.trim_malloc)
        print(_row(sdpa, sdpa), flush=True)
        for mode in ["capture", "fit", "old"] if n <= args.old_up_to else ["capture", "fit"]:
            print(_row(run_child(mode, n, args.threads, args.trim_malloc), sdpa), flush=True)
        print(f"{'':>6} (all runs of n = {n}: {time.perf_counter() - t0:.0f} s)", flush=True)


if __name__ == "__main__":
    main()
