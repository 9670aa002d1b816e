"""Benchmark of the logit fit, printed side by side in one run.

1. Speed against the reference sparse solve (scipy lsqr, tight tolerance) at n = 512
   (goal ≥ 100×): one head by lsqr vs the exact fit per head, batched over a layer's heads.
2. Fit-all-heads time / capture-forward time for the embedded SmolLM2-135M at n = 512
   (goal ≤ 0.25): the same forward with the fitting consumer and with an empty one; the
   fit time is the consumer's time inside the forward (each layer reduced to its sums,
   three-axis, two-axis and distance+key) plus the batched solve of all layers after it.
3. Extra peak memory of fitting one layer vs two layers' float32 logits (goal ≤ 1), the
   summing buffer included; the layout (S⁻ etc.), built once per (n, mask) and shared by
   every head, layer and document, is printed beside it:
   CUDA: max_memory_allocated; CPU: peak resident set (VmHWM, reset through clear_refs),
   measured in a child process whose glibc mmap threshold is lowered so that freed blocks
   leave the resident set (the timings run with the default allocator).

Usage: python benchmarks/bench_logit_fit.py [--device cpu|cuda] [--tokens 512] [--repeats 5]
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch


def _sync(device: str) -> None:
    if device.startswith("cuda"):
        torch.cuda.synchronize()


def _vm(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def bench_reference(n: int, heads: int, device: str, repeats: int) -> dict:
    from posgen.harness.additive_fit.logit_fit import FitOptions, LayoutCache, fit_heads
    from posgen.harness.additive_fit.logit_fit_reference import reference_fit

    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(heads, n, n, generator=gen).to(device)
    mask = FitOptions().apply(torch.ones(n, n, dtype=torch.bool))
    cache = LayoutCache()
    t0 = time.perf_counter()
    layout = cache.get(mask, device)
    build = time.perf_counter() - t0
    times = []
    for _ in range(repeats):
        _sync(device)
        t0 = time.perf_counter()
        fits = fit_heads(logits, cache.get(mask, device))
        _sync(device)
        times.append(time.perf_counter() - t0)
    per_head = min(times) / heads
    t0 = time.perf_counter()
    ref = reference_fit(logits[0].cpu().numpy(), mask.numpy())
    lsqr = time.perf_counter() - t0
    return {
        "n": n,
        "layout_build_s": build,
        "fit_per_head_s": per_head,
        "lsqr_per_head_s": lsqr,
        "speedup": lsqr / per_head,
        "abs_diff_r": abs(ref["r"] - fits.r_3axis[0].item()),
        "layout_entries": layout.n_entries,
    }


def bench_model(tokens: int, device: str, repeats: int) -> dict:
    from posgen.harness.additive_fit.logit_fit import FitOptions, LayoutCache
    from posgen.harness.decomposition.pipeline import load_model
    from posgen.harness.decomposition.probe import probe_token_windows
    from posgen.harness.decomposition.streaming_fit import LayerFitter
    from posgen.harness.model_side.logits.capture import capture_attention

    model, tok = load_model("embedded", device=device)
    ids = torch.tensor([probe_token_windows(tok, docs=1, tokens=tokens)[0]], device=device)
    mask = torch.ones_like(ids)
    fitter = LayerFitter(FitOptions(), LayoutCache())
    fit_time = [0.0]

    def timed(cap) -> None:
        _sync(device)
        t0 = time.perf_counter()
        fitter(cap)
        _sync(device)
        fit_time[0] += time.perf_counter() - t0

    def forward(consumer) -> float:
        _sync(device)
        t0 = time.perf_counter()
        with torch.no_grad(), capture_attention(model, consumer):
            model(ids, attention_mask=mask, use_cache=False)
        _sync(device)
        return time.perf_counter() - t0

    def finish() -> float:  # the batched solve of all layers after the forward
        _sync(device)
        t0 = time.perf_counter()
        fitter.finish()
        _sync(device)
        return time.perf_counter() - t0

    forward(timed)  # warm-up: builds and caches the layout
    finish()
    plain, fitted = [], []
    for _ in range(repeats):
        plain.append(forward(lambda cap: None))
        fit_time[0] = 0.0
        total = forward(timed)
        solve = finish()
        fitted.append((fit_time[0] + solve, total - fit_time[0], solve))
    fit_s, fwd_s, solve_s = min(fitted)
    return {
        "forward_capture_s": min(plain),
        "forward_in_fit_run_s": fwd_s,
        "fit_all_heads_s": fit_s,
        "batched_solve_s": solve_s,
        "ratio": fit_s / min(plain),
        "layers": model.config.num_hidden_layers,
        "heads": model.config.num_attention_heads,
        "float32_vs_float64_r": float32_vs_float64(model, ids, mask),
    }


def float32_vs_float64(model, ids, mask) -> float:
    """Largest |r| difference over all heads between float32 and float64 sums (3-axis,
    2-axis, row-centred) on the embedded model's logits."""
    from posgen.harness.additive_fit.logit_fit import FitOptions, LayoutCache, fit_sums, head_sums
    from posgen.harness.model_side.logits.capture import capture_attention

    layouts, worst = LayoutCache(), [0.0]

    def both(cap) -> None:
        layout = layouts.get(FitOptions().apply(cap.attended[0, 0]), cap.logits.device)
        f32, f64 = (
            fit_sums(head_sums(cap.logits[0], layout, dtype=dt), layout)
            for dt in (torch.float32, torch.float64)
        )
        for name in ("r_3axis", "r_2axis", "r_row_centred"):
            diff = (getattr(f32, name) - getattr(f64, name)).abs().max().item()
            worst[0] = max(worst[0], diff)

    with torch.no_grad(), capture_attention(model, both):
        model(ids, attention_mask=mask, use_cache=False)
    return worst[0]


def bench_memory(tokens: int, device: str) -> dict:
    """Extra peak memory of the fit consumer on one captured layer, plus its batched solve.

    CPU: meant for a process whose glibc returns freed large blocks to the system
    (``MALLOC_MMAP_THRESHOLD_``, see ``_memory_in_child``), so that the peak resident set
    shows the fit's own peak; the timings run in a process with the default allocator.
    """
    from posgen.harness.additive_fit.logit_fit import FitOptions, LayoutCache
    from posgen.harness.decomposition.pipeline import load_model
    from posgen.harness.decomposition.probe import probe_token_windows
    from posgen.harness.decomposition.streaming_fit import LayerFitter
    from posgen.harness.model_side.logits.capture import capture_attention

    model, tok = load_model("embedded", device=device)
    ids = torch.tensor([probe_token_windows(tok, docs=1, tokens=tokens)[0]], device=device)
    mask = torch.ones_like(ids)
    fitter = LayerFitter(FitOptions(), LayoutCache())
    kept = {}

    def keep(cap) -> None:
        if cap.layer == 0:
            kept["cap"] = cap

    with torch.no_grad(), capture_attention(model, keep):
        model(ids, attention_mask=mask, use_cache=False)
    cap = kept["cap"]
    cap.query, cap.key = cap.query.clone(), cap.key.clone()
    layer_bytes = cap.query.shape[0] * cap.query.shape[1] * cap.query.shape[2] ** 2 * 4  # logits

    def fit_layer() -> None:
        fitter(cap)
        fitter.finish()

    def drop_workspaces() -> int:  # so that the measured peak includes the summing buffer
        (layout,) = fitter.layouts._layouts.values()
        for key in [k for k in layout.extra if k[0] == "workspace"]:
            del layout.extra[key]
        return layout.held_bytes

    fit_layer()  # builds the layout (kept, like the model's weights, for every layer and doc)
    layout_bytes = drop_workspaces()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fit_layer()
        torch.cuda.synchronize()
        extra = torch.cuda.max_memory_allocated() - base
        how = "cuda max_memory_allocated"
    else:
        base = _vm("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")
        fit_layer()
        extra = _vm("VmHWM") - base
        how = "peak RSS (VmHWM after clear_refs)"
    return {
        "extra_bytes": extra,
        "two_layers_bytes": 2 * layer_bytes,
        "fraction": extra / (2 * layer_bytes),
        "layout_bytes": layout_bytes,
        "how": how,
    }


def _memory_in_child(args: argparse.Namespace) -> dict:
    """bench_memory in a child process whose glibc serves large blocks by mmap, returned on
    free (MALLOC_MMAP_THRESHOLD_): its peak RSS then shows the fit's own peak."""
    env = dict(os.environ, MALLOC_MMAP_THRESHOLD_="131072")
    cmd = [sys.executable, __file__, "--memory-only", "--device", args.device]
    out = subprocess.run(
        [*cmd, "--tokens", str(args.tokens)], env=env, capture_output=True, text=True
    )
    if out.returncode != 0:
        sys.exit(f"memory measurement failed (exit {out.returncode}):\n{out.stderr}")
    return json.loads(out.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--memory-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    if args.memory_only:
        print(json.dumps(bench_memory(args.tokens, args.device)))
        return
    ref = bench_reference(args.tokens, 9, args.device, args.repeats)
    mod = bench_model(args.tokens, args.device, args.repeats)
    mem = _memory_in_child(args)
    mib = 2**20
    print(f"device {args.device}, torch threads {torch.get_num_threads()}, n = {args.tokens}")
    print(f"{'measure':<48}{'value':>14}  goal")
    rows = [
        ("lsqr reference, one head (s)", f"{ref['lsqr_per_head_s']:.3f}", ""),
        ("exact fit per head, batched over 9 heads (s)", f"{ref['fit_per_head_s']:.5f}", ""),
        ("speed-up vs lsqr", f"{ref['speedup']:.0f}x", ">= 100x"),
        ("|r - r_lsqr|", f"{ref['abs_diff_r']:.1e}", "<= 1e-6"),
        ("max |r(float32 sums) - r(float64)|, all heads", f"{mod['float32_vs_float64_r']:.1e}", ""),
        ("layout build, once per (n, mask) (s)", f"{ref['layout_build_s']:.3f}", ""),
        (
            f"capture forward, {mod['layers']}x{mod['heads']} heads (s)",
            f"{mod['forward_capture_s']:.3f}",
            "",
        ),
        ("fit all heads incl. distance+key (s)", f"{mod['fit_all_heads_s']:.3f}", ""),
        ("  of which the batched solve of all layers (s)", f"{mod['batched_solve_s']:.3f}", ""),
        ("fit / capture-forward", f"{mod['ratio']:.3f}", "<= 0.25"),
        ("extra peak memory, one layer's fit (MiB)", f"{mem['extra_bytes'] / mib:.1f}", ""),
        ("two layers' float32 logits (MiB)", f"{mem['two_layers_bytes'] / mib:.1f}", ""),
        ("extra peak / two layers' logits", f"{mem['fraction']:.2f}", "<= 1"),
        ("layout held once per (n, mask) (MiB)", f"{mem['layout_bytes'] / mib:.1f}", ""),
    ]
    for name, value, goal in rows:
        print(f"{name:<48}{value:>14}  {goal}")
    print(f"memory measured by {mem['how']}")


if __name__ == "__main__":
    main()
