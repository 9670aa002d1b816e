"""What prefix reuse saves in ``posgen layers``: cells scored with and without it, side by side.

Loads the model once (as ``posgen layers`` does: ``hf-posgen``, batch size 8), scores the
posgen_prose documents plainly (recording every decoder layer's output), then, for each
chosen layer L, the cell "position scheme in layer L only" twice: the whole stack, and
with layers 0..L−1 replayed from the plain pass. Prints per cell the wall and CPU seconds
of both, their ratio, and whether the two scores are identical (they must be: the
replayed outputs are bit for bit what the layers compute). Then the estimate for a whole
profile: the plain cell, one cell per layer and the all-layer cell, from the measured
per-layer cost.

    python benchmarks/bench_layers.py                      # embedded model, layers 0;10;20;29
    python benchmarks/bench_layers.py --model PATH --layers "0;4;8" --limit 12
"""

from __future__ import annotations

import argparse
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--layers", default="0;10;20;29")
    parser.add_argument("--limit", type=int, default=12)
    parser.add_argument("--positions", default="swap:0.2")
    parser.add_argument("--batch-size", type=int, default=8)
    args = parser.parse_args()

    from posgen.harness.hf_posgen.model import HFPosgenLM
    from posgen.harness.loaded_model.prose_cells import prose_documents, score_documents
    from posgen.harness.model_side.positions.selection import parse_layers
    from posgen.harness.model_side.prefix_reuse import PrefixReuse

    texts = [d["text"] for d in prose_documents(args.limit)]
    lm = HFPosgenLM(pretrained=args.model, device="cpu", batch_size=args.batch_size)
    count = len(PrefixReuse(lm.model).layers)

    def cell(layer: int | None) -> tuple[list[float], float, float]:
        if layer is None:
            lm.set_perturbation(None, None, 1234)
        else:
            lm.set_perturbation(args.positions, None, 1234, layers=str(layer))
        wall, cpu = time.perf_counter(), time.process_time()
        scores = score_documents(lm, texts)
        return scores, time.perf_counter() - wall, time.process_time() - cpu

    _, plain_wall, plain_cpu = cell(None)  # warm-up, without recording
    reuse = PrefixReuse(lm.model)
    lm.prefix_reuse = reuse
    _, rec_wall, rec_cpu = cell(None)
    print(
        f"{args.model}: {count} layers, {len(texts)} documents, batch {args.batch_size}; "
        f"plain cell {plain_wall:.1f} s wall ({plain_cpu:.1f} CPU-s), recording {rec_wall:.1f} s "
        f"({rec_cpu:.1f} CPU-s); reuse {reuse.note}"
    )
    print("| layer | whole stack s (CPU-s) | reuse s (CPU-s) | wall ratio | identical |")
    print("|---|---|---|---|---|")
    ratios = {}
    for layer in parse_layers(args.layers) or ():
        lm.prefix_reuse = None
        whole, w_wall, w_cpu = cell(layer)
        lm.prefix_reuse = reuse
        fast, r_wall, r_cpu = cell(layer)
        ratios[layer] = (w_wall, r_wall)
        print(
            f"| {layer} | {w_wall:.1f} ({w_cpu:.1f}) | {r_wall:.1f} ({r_cpu:.1f}) | "
            f"{r_wall / w_wall:.2f} | {whole == fast} |"
        )
    # a whole profile: cost(L) ≈ fixed + per_layer × (count − L), fitted on the measured cells
    import numpy as np

    xs = np.array([count - layer for layer in ratios], float)
    ys = np.array([r for _, r in ratios.values()], float)
    if len(xs) >= 2 and np.ptp(xs) > 0:
        slope, fixed = np.polyfit(xs, ys, 1)
        per_cell = fixed + slope * (count - (count - 1) / 2)
        whole_mean = float(np.mean([w for w, _ in ratios.values()]))
        total = rec_wall + count * per_cell + whole_mean
        print(
            f"profile estimate (plain + {count} layers + all): {total / 60:.1f} min with reuse, "
            f"{(rec_wall + (count + 1) * whole_mean) / 60:.1f} min without "
            f"(cost of a cell ≈ {fixed:.1f} s + {slope:.2f} s per layer run)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
