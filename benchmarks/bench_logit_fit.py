"""Benchmark of the logit fit, printed side by side in one run.

1. Speed against the reference sparse solve (scipy lsqr, tight tolerance) at n = 512
   (goal ≥ 100×): one head by lsqr vs the exact fit per head, batched over a layer's heads.
2. Fit-all-heads time / capture-forward time for the embedded SmolLM2-135M at n = 512
   (goal ≤ 0.25): the same forward with the fitting consumer and with an empty one.
3. Extra peak memory of fitting one layer vs two layers' float32 logits (goal ≤ 1):
   CUDA: max_memory_allocated; CPU: peak resident set (VmHWM, reset through clear_refs),
   with glibc's mmap threshold lowered so that freed blocks leave the resident set.

Usage: python benchmarks/bench_logit_fit.py [--device cpu|cuda] [--tokens 512] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
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
    from posgen.results.logit_fit import FitOptions, LayoutCache, fit_heads
    from posgen.results.logit_fit_reference import reference_fit

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
    from posgen.harness.attention_capture import capture_attention
    from posgen.harness.decompose import _LayerFitter, load_model
    from posgen.harness.decompose_io import probe_token_windows
    from posgen.results.logit_fit import FitOptions, LayoutCache

    model, tok = load_model("embedded", device=device)
    ids = torch.tensor([probe_token_windows(tok, docs=1, tokens=tokens)[0]], device=device)
    mask = torch.ones_like(ids)
    fitter = _LayerFitter(FitOptions(), LayoutCache())
    fit_time = [0.0]
    layer_bytes = []

    def timed(cap) -> None:
        _sync(device)
        t0 = time.perf_counter()
        fitter(cap)
        _sync(device)
        fit_time[0] += time.perf_counter() - t0
        layer_bytes.append(cap.logits.numel() * 4)

    def forward(consumer) -> float:
        _sync(device)
        t0 = time.perf_counter()
        with torch.no_grad(), capture_attention(model, consumer):
            model(ids, attention_mask=mask, use_cache=False)
        _sync(device)
        return time.perf_counter() - t0

    forward(timed)  # warm-up: builds and caches the layout
    plain, fitted = [], []
    for _ in range(repeats):
        plain.append(forward(lambda cap: None))
        fit_time[0] = 0.0
        total = forward(timed)
        fitted.append((fit_time[0], total - fit_time[0]))
    fit_s, fwd_s = min(fitted)
    return {
        "forward_capture_s": min(plain),
        "forward_in_fit_run_s": fwd_s,
        "fit_all_heads_s": fit_s,
        "ratio": fit_s / min(plain),
        "layers": model.config.num_hidden_layers,
        "heads": model.config.num_attention_heads,
        "peak": bench_memory(model, ids, mask, fitter, device, max(layer_bytes)),
    }


def bench_memory(model, ids, mask, fitter, device: str, layer_bytes: int) -> dict:
    """Extra peak memory of the fit consumer on one captured layer."""
    from posgen.harness.attention_capture import capture_attention

    kept = {}

    def keep(cap) -> None:
        if cap.layer == 0:
            kept["cap"] = cap

    with torch.no_grad(), capture_attention(model, keep):
        model(ids, attention_mask=mask, use_cache=False)
    cap = kept["cap"]
    cap.logits, cap.query, cap.key = cap.logits.clone(), cap.query.clone(), cap.key.clone()
    if device.startswith("cuda"):
        torch.cuda.synchronize()
        base = torch.cuda.memory_allocated()
        torch.cuda.reset_peak_memory_stats()
        fitter(cap)
        torch.cuda.synchronize()
        extra = torch.cuda.max_memory_allocated() - base
        how = "cuda max_memory_allocated"
    else:
        fitter(cap)  # the layout is cached: measure the per-layer work only
        base = _vm("VmRSS")
        Path("/proc/self/clear_refs").write_text("5")
        fitter(cap)
        extra = _vm("VmHWM") - base
        how = "peak RSS (VmHWM after clear_refs)"
    return {
        "extra_bytes": extra,
        "two_layers_bytes": 2 * layer_bytes,
        "fraction": extra / (2 * layer_bytes),
        "how": how,
    }


def main() -> None:
    if "MALLOC_MMAP_THRESHOLD_" not in os.environ:
        # large blocks by mmap, returned on free: the peak RSS then shows the fit's own peak
        os.environ["MALLOC_MMAP_THRESHOLD_"] = "131072"
        os.execv(sys.executable, [sys.executable, *sys.argv])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    parser.add_argument("--tokens", type=int, default=512)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    torch.set_grad_enabled(False)
    ref = bench_reference(args.tokens, 9, args.device, args.repeats)
    mod = bench_model(args.tokens, args.device, args.repeats)
    mem = mod.pop("peak")
    mib = 2**20
    print(f"device {args.device}, torch threads {torch.get_num_threads()}, n = {args.tokens}")
    print(f"{'measure':<48}{'value':>14}  goal")
    rows = [
        ("lsqr reference, one head (s)", f"{ref['lsqr_per_head_s']:.3f}", ""),
        ("exact fit per head, batched over 9 heads (s)", f"{ref['fit_per_head_s']:.5f}", ""),
        ("speed-up vs lsqr", f"{ref['speedup']:.0f}x", ">= 100x"),
        ("|r - r_lsqr|", f"{ref['abs_diff_r']:.1e}", "<= 1e-6"),
        ("layout build, once per (n, mask) (s)", f"{ref['layout_build_s']:.3f}", ""),
        (
            f"capture forward, {mod['layers']}x{mod['heads']} heads (s)",
            f"{mod['forward_capture_s']:.3f}",
            "",
        ),
        ("fit all heads incl. distance+key (s)", f"{mod['fit_all_heads_s']:.3f}", ""),
        ("fit / capture-forward", f"{mod['ratio']:.3f}", "<= 0.25"),
        ("extra peak memory, one layer's fit (MiB)", f"{mem['extra_bytes'] / mib:.1f}", ""),
        ("two layers' float32 logits (MiB)", f"{mem['two_layers_bytes'] / mib:.1f}", ""),
        ("extra peak / two layers' logits", f"{mem['fraction']:.2f}", "<= 1"),
    ]
    for name, value, goal in rows:
        print(f"{name:<48}{value:>14}  {goal}")
    print(f"memory measured by {mem['how']}")


if __name__ == "__main__":
    main()
