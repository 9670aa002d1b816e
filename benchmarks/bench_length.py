"""Benchmark of ``posgen length``: peak extra memory and wall time per long document.

For each length scheme, a child process loads the model (with the scheme's rope
parameters where it has any), tokenizes the first long document of the offline suite to
``--tokens`` tokens and runs what ``posgen length`` runs for one (scheme, document): one
forward under the scheme with the drift capture, and the LM head in chunks. Measured:

- peak extra memory: the child's peak resident set during that step (VmHWM, reset
  through ``/proc/self/clear_refs`` after the model is loaded) minus its resident set
  before it; the child's glibc serves large blocks by mmap (``MALLOC_MMAP_THRESHOLD_``),
  so freed blocks leave the resident set and the peak is the step's own. Goal: ≤ 2 GB
  at 16k tokens on the embedded model.
- wall time of that step, on the cores the machine gives (``--threads``), and the part
  CPU time spent inside the attention blocks (a forward pre/post hook on every layer's
  attention module: projections, rotary and the attention function itself).
- side by side, each scheme's times divided by those of ``none`` (plain sdpa) in the
  same run: the ``attn / none`` column is the Λ-versus-sdpa cost per layer.
- ``window`` (or ``window:S``) among the schemes: the in-distribution window pass
  (:func:`posgen.harness.length.window.window_nll`, stride S, default C/2) on the same
  document, no drift capture, timed the same way: its ``wall / none`` column is what
  the pass adds to a run, per document, as a share of one plain forward.

The wall time depends on what else runs on the machine; the CPU time (user + system of
the child) and the load average are printed beside it.

A no-grad forward frees each layer's activations before the next layer runs, so the peak
extra memory does not grow with depth: ``--layers K`` keeps the first K decoder layers to
measure it at full length in a fraction of the time (the printed ``layers`` column says
which figure is which; run once with and once without at a smaller length to see it).

Usage: python benchmarks/bench_length.py [--tokens 16384] [--schemes "none;lambda:4,8192"]
                                         [--layers K]
The window pass beside a plain forward (what it adds to a run):
       python benchmarks/bench_length.py --schemes "none;window" --layers 2
Λ against sdpa in under 3 minutes on 2 cores:
       python benchmarks/bench_length.py --tokens 4096 --layers 4 --schemes "none;lambda:4,2048"
InfLLM (its defaults scaled to C) beside Λ at full length:
       python benchmarks/bench_length.py --tokens 16384 --layers 2 --schemes "lambda:4,8192;infllm"
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

GOAL_BYTES = 2 * 1024**3
DEFAULT_SCHEMES = "none;lambda:4,8192;scale:2;yarn:2"


def _vm(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def child(scheme_text: str, tokens: int, model_name: str, layers: int | None) -> dict:

    import numpy as np
    import torch

    from posgen.harness.length.drift import attention_modules
    from posgen.harness.length.nll import position_nll
    from posgen.harness.loading import load_model, model_entries
    from posgen.perturbations.length import parse_length
    from posgen.tasks.long_documents import long_documents

    window = scheme_text.split(":")[0] == "window"
    scheme = parse_length("none" if window else scheme_text)
    (entry,) = model_entries([model_name])
    loaded = load_model(entry, "cpu", length=scheme)
    model = loaded.model
    if hasattr(scheme, "for_context"):  # infllm: its defaults scaled to the trained context
        scheme = scheme.for_context(int(model.config.max_position_embeddings))
    if layers:  # keep the first decoder layers only (see --layers)
        model.model.layers = model.model.layers[:layers]
        model.config.num_hidden_layers = layers
    doc, text = next(iter(long_documents().items()))
    ids = loaded.tokenizer(text).input_ids[:tokens]
    if len(ids) < tokens:
        raise SystemExit(f"{doc} has only {len(ids)} tokens")
    input_ids = torch.tensor([ids])
    c = int(model.config.max_position_embeddings if scheme.rope_type != "yarn" else tokens // 2)
    position_nll(model, input_ids[:, :64])  # page the mmapped weights in before measuring
    attention = _time_attention(attention_modules(model))
    base = _vm("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    start, cpu = time.perf_counter(), time.process_time()
    nll = _step(model, input_ids, scheme_text if window else scheme, c)
    seconds, cpu = time.perf_counter() - start, time.process_time() - cpu
    for handle in attention.pop("handles"):
        handle.remove()
    return {
        "scheme": scheme_text if window else scheme.to_string(),
        "document": doc,
        "tokens": tokens,
        "extra_bytes": _vm("VmHWM") - base,
        "seconds": seconds,
        "cpu_seconds": cpu,
        "attention_seconds": attention["seconds"],
        "mean_nll": float(np.nanmean(nll[1:])),
        "threads": torch.get_num_threads(),
        "layers": len(model.model.layers),
    }


def _step(model, input_ids, scheme, c: int):
    """What posgen length runs per document: the window pass (``window[:S]``, S = C/2 by
    default) or one forward under ``scheme`` with the drift capture; the NLLs it gives."""
    from posgen.harness.length.drift import drift_capture
    from posgen.harness.length.nll import position_nll
    from posgen.harness.length.window import window_nll
    from posgen.harness.model_side import door
    from posgen.harness.model_side.perturbation import ModelPerturbation

    if isinstance(scheme, str):
        stride = int(scheme.split(":")[1]) if ":" in scheme else c // 2
        return window_nll(model, input_ids, c, stride)[c:]
    p = ModelPerturbation(length=scheme)
    plan = door.plan_forward(input_ids, p, model=model)
    with door.forward(model, p, plan), drift_capture(model, c, c // 8, 16):
        return position_nll(model, input_ids)


def _time_attention(modules: list) -> dict:
    """CPU seconds of the process (all threads) spent inside ``modules`` (summed), kept in
    the returned dict: CPU time, not wall time, so other load on the machine does not
    count."""
    timer = {"seconds": 0.0, "start": 0.0}

    def pre(module, args):
        timer["start"] = time.process_time()

    def post(module, args, output):
        timer["seconds"] += time.process_time() - timer["start"]

    timer["handles"] = [
        h
        for m in modules
        for h in (m.register_forward_pre_hook(pre), m.register_forward_hook(post))
    ]
    return timer


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--schemes", default=DEFAULT_SCHEMES)
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument(
        "--layers",
        type=int,
        default=None,
        help="keep only the first K decoder layers (memory check at full length in less time)",
    )
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.tokens, args.model, args.layers)))
        return
    env = dict(
        os.environ,
        MALLOC_MMAP_THRESHOLD_="131072",
        OMP_NUM_THREADS=str(args.threads),
    )
    rows = []
    for scheme in [s for s in args.schemes.split(";") if s]:
        cmd = [sys.executable, __file__, "--child", scheme, "--tokens", str(args.tokens)]
        cmd += ["--layers", str(args.layers)] if args.layers else []
        out = subprocess.run([*cmd, "--model", args.model], env=env, capture_output=True, text=True)
        if out.returncode != 0:
            sys.exit(f"{scheme}: child failed (exit {out.returncode}):\n{out.stderr[-3000:]}")
        rows.append(json.loads(out.stdout.strip().splitlines()[-1]))
        print(f"done {scheme}", file=sys.stderr, flush=True)
    plain = next((r for r in rows if r["scheme"] == "none"), None)
    print(
        f"{'scheme':<16} {'tokens':>7} {'extra peak RSS':>15} {'/ 2 GB goal':>11} "
        f"{'wall s':>8} {'CPU s':>8} {'attn CPU s':>10} {'wall / none':>11} {'attn / none':>11} "
        f"{'threads':>7} {'layers':>6} {'mean NLL':>9}"
    )
    for r in rows:
        wall_ratio = f"{r['seconds'] / plain['seconds']:.2f}" if plain else "-"
        attn_ratio = f"{r['attention_seconds'] / plain['attention_seconds']:.2f}" if plain else "-"
        print(
            f"{r['scheme']:<16} {r['tokens']:>7} {r['extra_bytes'] / 2**20:>11.0f} MiB "
            f"{r['extra_bytes'] / GOAL_BYTES:>11.2f} {r['seconds']:>8.1f} {r['cpu_seconds']:>8.1f} "
            f"{r['attention_seconds']:>10.1f} {wall_ratio:>11} {attn_ratio:>11} "
            f"{r['threads']:>7} {r['layers']:>6} {r['mean_nll']:>9.4f}"
        )
    print(f"load average during the run: {os.getloadavg()} on {os.cpu_count()} CPUs")
    print("GPU: no device was lent to this benchmark; figures are CPU only.")


if __name__ == "__main__":
    main()
