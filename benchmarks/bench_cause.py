"""What ``posgen cause`` costs per forward, side by side in one process.

On one window of the probe text (``--tokens``, default 1024) of the embedded model, four
forwards, interleaved round by round (so that a change of machine load hits all four
alike), each timed ``--repeats`` times (the fastest wall time counts; CPU seconds beside):

1. plain: the model's own forward (sdpa);
2. intervention: ``hf-posgen logits=additive`` in every layer (each layer's logits fitted
   exactly and replaced, :mod:`posgen.harness.model_side.logits.replacement`);
3. capture: the decomposition's captured forward with its streaming fit
   (``posgen decompose``'s ``LayerFitter``, fitted after the forward);
4. prediction: the captured forward that measures and predicts the logit change of
   ``--positions`` in every layer (:mod:`posgen.harness.decomposition.predicted_change`).

Goals: intervention ≤ 2 × plain; prediction ≤ 1.5 × capture.

    python benchmarks/bench_cause.py                       # embedded, 1024 tokens, 3 rounds
    python benchmarks/bench_cause.py --tokens 512 --repeats 5 --threads 2
"""

from __future__ import annotations

import argparse
import time


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="embedded")
    parser.add_argument("--tokens", type=int, default=1024)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--positions", default="swap:0.2")
    parser.add_argument("--threads", type=int, default=0, help="torch threads (0: torch's own)")
    args = parser.parse_args()

    import torch

    from posgen.harness.additive_fit.logit_fit import FitOptions, LayoutCache
    from posgen.harness.decomposition.pipeline import load_model
    from posgen.harness.decomposition.predicted_change import (
        ChangePredictor,
        perturbed_positions,
    )
    from posgen.harness.decomposition.probe import probe_token_windows
    from posgen.harness.decomposition.streaming_fit import LayerFitter
    from posgen.harness.model_side.logits.capture import capture_forward
    from posgen.harness.model_side.logits.forms import LogitForm
    from posgen.harness.model_side.logits.replacement import LogitReplacement, logits_replaced
    from posgen.harness.model_side.positions.layers import layer_count, layer_positions
    from posgen.perturbations.base import registry

    if args.threads:
        torch.set_num_threads(args.threads)
    model, tok = load_model(args.model, device="cpu")
    ids = probe_token_windows(tok, docs=1, tokens=args.tokens)[0]
    batch = torch.tensor([ids])
    layers = list(range(layer_count(model)))
    scheme = registry.parse("position", args.positions)
    positions = perturbed_positions(ids, scheme, 1234)

    def plain() -> None:
        with torch.no_grad():
            model(batch)

    def intervention() -> None:
        with torch.no_grad(), logits_replaced(model, LogitReplacement(LogitForm("additive"))):
            model(batch)

    def capture() -> None:
        fitter = LayerFitter(FitOptions(), LayoutCache())
        capture_forward(model, ids, fitter)
        fitter.finish()

    def prediction() -> None:
        with layer_positions(model, positions[None], layers, split_heads=True):
            capture_forward(model, ids, ChangePredictor(positions))

    runs = {
        "plain": plain,
        "intervention": intervention,
        "capture": capture,
        "prediction": prediction,
    }
    best = {k: (float("inf"), 0.0) for k in runs}
    for f in runs.values():  # warm-up: allocations, registrations, layouts
        f()
    for _ in range(args.repeats):
        for name, f in runs.items():
            wall, cpu = time.perf_counter(), time.process_time()
            f()
            wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
            if wall < best[name][0]:
                best[name] = (wall, cpu)
    print(
        f"{args.model}, {args.tokens} tokens, {len(layers)} layers, {args.positions}, "
        f"{torch.get_num_threads()} torch threads, best of {args.repeats} rounds"
    )
    print("| forward | wall s | CPU-s | ratio | goal |")
    print("|---|---|---|---|---|")
    goals = {"intervention": ("plain", 2.0), "prediction": ("capture", 1.5)}
    for name, (wall, cpu) in best.items():
        ratio, goal = "", ""
        if name in goals:
            ref, limit = goals[name]
            r = wall / best[ref][0]
            ratio = f"{r:.2f} × {ref}"
            goal = f"≤ {limit} {'met' if r <= limit else 'NOT met'}"
        print(f"| {name} | {wall:.2f} | {cpu:.2f} | {ratio} | {goal} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
