"""Benchmark of ``posgen length``'s shared prefix: the whole-forward path against the
reuse path, side by side in one process, on one long document.

The whole path runs each scheme's own forward of ``--tokens`` tokens (with the drift
capture and the LM head in chunks, as ``posgen length`` did before the reuse); the reuse
path runs the prefix [0, P) once with a KV cache and each scheme's suffix [P, n) from a
copy of it (:mod:`posgen.harness.length.reuse`). Printed per path: CPU seconds (user +
system of this process), wall seconds, peak extra resident memory (VmHWM after a reset
through ``/proc/self/clear_refs``, minus the resident set before), and the ratio of the
two paths; then the largest |ΔNLL| between them per scheme. ``C`` in a scheme is the
model's trained context. Run on shared cores, compare the CPU seconds.

Usage: python benchmarks/bench_length_reuse.py [--tokens 16384] [--layers K]
                                               [--schemes "none;lambda:4,C"]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path
from types import SimpleNamespace

import numpy as np


def _vm(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field):
            return int(line.split()[1]) * 1024
    raise RuntimeError(f"{field} not in /proc/self/status")


def _measured(run):
    """(result, cpu seconds, wall seconds, peak extra bytes) of ``run()``."""
    base = _vm("VmRSS")
    Path("/proc/self/clear_refs").write_text("5")
    wall, cpu = time.perf_counter(), time.process_time()
    result = run()
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    return result, cpu, wall, _vm("VmHWM") - base


def main() -> None:
    import torch

    from posgen.harness.length.drift import drift_capture
    from posgen.harness.length.nll import position_nll
    from posgen.harness.length.reuse import run_prefix, run_suffix, shared_length
    from posgen.harness.loading import load_model, model_entries
    from posgen.harness.model_side import door
    from posgen.harness.model_side.perturbation import ModelPerturbation
    from posgen.perturbations.length import parse_length
    from posgen.tasks.long_documents import long_documents

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--layers", type=int, default=None, help="keep the first K layers")
    parser.add_argument("--schemes", default="none;lambda:4,C")
    parser.add_argument("--model", default="embedded")
    args = parser.parse_args()
    (entry,) = model_entries([args.model])
    loaded = load_model(entry, "cpu")
    model = loaded.model
    if args.layers:
        model.model.layers = model.model.layers[: args.layers]
        model.config.num_hidden_layers = args.layers
    c = int(model.config.max_position_embeddings)
    schemes = [parse_length(s.replace("C", str(c))) for s in args.schemes.split(";")]
    doc, text = next(iter(long_documents().items()))
    ids = torch.tensor([loaded.tokenizer(text).input_ids[: args.tokens]])
    config = SimpleNamespace(
        seed=1234, block_size=None, chunk=1024, trained_context=c, bucket_width=c // 8, n_buckets=16
    )
    position_nll(model, ids[:, :64])  # page the weights in before measuring

    def whole():
        out = []
        for s in schemes:
            p = ModelPerturbation(length=s)
            plan = door.plan_forward(ids, p, model=model)
            with door.forward(model, p, plan), drift_capture(model, c, c // 8, 16):
                out.append(position_nll(model, ids))
        return out

    def reuse():
        prefix = run_prefix(model, ids, shared_length(schemes, c), 1024, [], c)
        return [run_suffix(model, ids, prefix, s, config)[0] for s in schemes]

    a, cpu_a, wall_a, mem_a = _measured(whole)
    b, cpu_b, wall_b, mem_b = _measured(reuse)
    print(
        f"{doc}: {ids.shape[1]} tokens, {len(model.model.layers)} layers, C = {c}, "
        f"P = {shared_length(schemes, c)}, threads {torch.get_num_threads()}"
    )
    print(f"{'path':>8} {'CPU s':>8} {'wall s':>8} {'peak extra MiB':>15}")
    for name, cpu, wall, mem in (("whole", cpu_a, wall_a, mem_a), ("reuse", cpu_b, wall_b, mem_b)):
        print(f"{name:>8} {cpu:>8.1f} {wall:>8.1f} {mem / 2**20:>15.0f}")
    print(f"reuse / whole: CPU {cpu_b / cpu_a:.3f}, wall {wall_b / wall_a:.3f}")
    for s, x, y in zip(schemes, a, b, strict=True):
        print(f"{s.to_string():>16}: max |ΔNLL| = {np.nanmax(np.abs(x - y)):.2e}")


if __name__ == "__main__":
    main()
