"""Benchmark: wall time of ``hf-posgen`` over plain ``hf`` on the same task and model.

Builds the task's requests once, then times ``loglikelihood_rolling`` (or
``loglikelihood``) of plain ``hf`` and of ``hf-posgen`` under identity (``swap:0``) and
``swap:0.05`` (and any ``--extra`` specs), interleaved over ``--repeats`` rounds after one
warm-up round; the figure per model is the fastest round (the least disturbed by other
load). Process CPU time is printed beside wall time: on a shared machine it is the steadier
figure. Goal: ratio ≤ 1.05.

Usage: python benchmarks/bench_model_perturbations.py [--pretrained embedded]
       [--task posgen_prose] [--limit 10] [--batch-size 4] [--repeats 3] [--device cpu]
       [--extra features=rope_noise:0.5 --extra features=qk_noise:0.1]
"""

from __future__ import annotations

import argparse
import copy
import time


def build_requests(task_name: str, limit: int | None) -> list:
    from lm_eval.tasks import get_task_dict

    from posgen.tasks.lm_eval_tasks import task_manager

    task = get_task_dict([task_name], task_manager())[task_name]
    task.build_all_requests(limit=limit, rank=0, world_size=1)
    return list(task.instances)


def run_once(lm, requests: list) -> tuple[float, float]:
    """(wall seconds, process CPU seconds) of one pass over ``requests``."""
    kinds = {r.request_type for r in requests}
    if len(kinds) != 1 or not kinds <= {"loglikelihood", "loglikelihood_rolling"}:
        raise SystemExit(f"benchmark needs one loglikelihood request type, got {kinds}")
    method = getattr(lm, kinds.pop())
    start, cpu = time.perf_counter(), time.process_time()
    method(copy.deepcopy(requests), disable_tqdm=True)
    return time.perf_counter() - start, time.process_time() - cpu


def parse_spec(text: str) -> dict[str, str]:
    key, _, value = text.partition("=")
    if key not in ("positions", "features") or not value:
        raise SystemExit(f"--extra wants positions=SPEC or features=SPEC, got {text!r}")
    return {key: value}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pretrained", default="embedded")
    ap.add_argument("--task", default="posgen_prose")
    ap.add_argument("--limit", type=int, default=10)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--extra", action="append", default=[], help="positions=SPEC|features=SPEC")
    args = ap.parse_args()

    from lm_eval.models.huggingface import HFLM

    from posgen.harness.embedded import resolve_pretrained
    from posgen.harness.hf_posgen.model import HFPosgenLM

    path = resolve_pretrained(args.pretrained)
    requests = build_requests(args.task, args.limit)
    common = dict(pretrained=path, device=args.device, batch_size=args.batch_size)
    models = {"hf": HFLM(**common)}
    posgen = HFPosgenLM(**common)  # one model, perturbations switched without reloading
    variants = [{"positions": "swap:0"}, {"positions": "swap:0.05"}]
    variants += [parse_spec(e) for e in args.extra]
    times: dict[str, list[tuple[float, float]]] = {"hf": []}
    for round_ in range(args.repeats + 1):
        for name, lm in models.items():
            elapsed = run_once(lm, requests)
            if round_:
                times[name].append(elapsed)
        for v in variants:
            posgen.set_perturbation(v.get("positions"), v.get("features"), seed=1234)
            elapsed = run_once(posgen, requests)
            label = "hf-posgen " + ",".join(f"{k}={s}" for k, s in v.items())
            if round_:
                times.setdefault(label, []).append(elapsed)
    print(
        f"task={args.task} limit={args.limit} requests={len(requests)} model={path} "
        f"batch_size={args.batch_size} device={args.device} rounds={args.repeats} (fastest)"
    )
    print_ratios(times, width=48, digits=3)


def print_ratios(times: dict[str, list[tuple[float, float]]], width: int, digits: int) -> None:
    """Per variant its fastest (wall, CPU) seconds and their ratios over plain ``hf``'s."""
    base_wall, base_cpu = (min(t[i] for t in times["hf"]) for i in (0, 1))
    print(f"{'':{width}s} {'wall s':>8s} {'ratio':>6s}   {'cpu s':>8s} {'ratio':>6s}")
    for label, ts in times.items():
        wall, cpu = min(t[0] for t in ts), min(t[1] for t in ts)
        print(
            f"{label:{width}s} {wall:8.{digits}f} {wall / base_wall:6.3f}   "
            f"{cpu:8.{digits}f} {cpu / base_cpu:6.3f}"
        )


if __name__ == "__main__":
    main()
