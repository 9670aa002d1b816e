"""InfLLM attention's cost per layer, without a model: one row of ``infllm_row`` on random
q, k, v of the embedded model's attention shape (9 query heads, head dim 64), its CPU
time per 1k tokens and per query chunk.

The whole-model cost at full length comes from ``benchmarks/bench_length.py --schemes
"lambda:4,8192;infllm"`` (a child process per scheme, peak memory included); this script
isolates the attention function, where InfLLM differs from Λ: its joint softmax runs on
explicit float32 scores ``[H, E, E + L + n_init + topk·B + B]`` per chunk, because the
local probabilities feed the block representatives, where Λ uses torch's fused kernel.

Usage: python benchmarks/bench_infllm.py [--tokens 16384] [--threads 2]
                                         [--scheme "infllm:..."] [--context 8192]
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    import torch

    from posgen.harness.model_side.attention import infllm as mod
    from posgen.perturbations.length import parse_length_list

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tokens", type=int, default=16384)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--scheme", default="infllm")
    parser.add_argument("--context", type=int, default=8192, help="C the defaults scale to")
    parser.add_argument("--heads", type=int, default=9)
    parser.add_argument("--head-dim", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    (scheme,) = parse_length_list(args.scheme, args.context)
    gen = torch.Generator().manual_seed(0)
    shape = (args.heads, args.tokens, args.head_dim)
    q, k, v, q_mem, k_mem = (torch.randn(shape, generator=gen) for _ in range(5))
    state = mod._State(scheme)
    start, cpu = time.perf_counter(), time.process_time()
    with torch.no_grad():
        mod.infllm_row(q, k, v, q_mem, k_mem, state, args.head_dim**-0.5)
    wall, cpu = time.perf_counter() - start, time.process_time() - cpu
    chunks = -(-args.tokens // scheme.exc_block_size)
    print(f"{scheme.to_string()}  n = {args.tokens}  threads = {args.threads}")
    per_k = cpu / args.tokens * 1024
    print(f"one layer: {wall:.2f} s wall, {cpu:.2f} CPU-s ({per_k:.3f} per 1k tokens)")
    print(f"{cpu / chunks:.3f} CPU-s per query chunk ({chunks} chunks)")


if __name__ == "__main__":
    main()
