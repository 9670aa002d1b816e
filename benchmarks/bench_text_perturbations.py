"""Text-perturbation speed, and what perturbing costs inside an lm-eval run.

1. Throughput: every text scheme over ~10 MB of the offline suite's prose (copies with a
   distinct suffix, so each doc draws its own permutation), on one core.
   Goal: 10 MB in <= 2 s.
2. Overhead: one task evaluated unperturbed and perturbed on the same model, side by side
   in one process, interleaved (A B A B ...), wall and CPU time per run; the ratio of
   medians perturbed / unperturbed. Goal: <= 1.05.

    python benchmarks/bench_text_perturbations.py [--mb 10] [--model embedded|PATH]
        [--task posgen_cloze] [--perturbation perm_swap_5pct] [--limit 48] [--repeats 3]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")


def corpus(mb: float) -> list[str]:
    from posgen.tasks import offline

    texts = [r["text"] for r in offline.load_rows("posgen_prose.jsonl")]
    docs, size, i = [], 0, 0
    while size < mb * 1e6:
        doc = f"{texts[i % len(texts)]} #{i}"
        docs.append(doc)
        size += len(doc.encode("utf-8"))
        i += 1
    return docs


def throughput(mb: float) -> None:
    from posgen.perturbations import parse

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    docs = corpus(mb)
    size = sum(len(d.encode("utf-8")) for d in docs) / 1e6
    print(f"throughput: {len(docs)} docs, {size:.1f} MB, one core")
    print("  (cpu = process CPU time: the figure to read on a shared machine)")
    for spec in ("swap:0.05", "swap:0.5", "adjacent:0.1", "local_shuffle:3", "shuffle"):
        p = parse("text", spec)
        t, c = time.perf_counter(), time.process_time()
        for i, d in enumerate(docs):
            p.apply(d, seed=1234, key=str(i))
        wall, cpu = time.perf_counter() - t, time.process_time() - c
        verdict = "ok" if cpu <= 2 * size / 10 else "SLOW"
        print(
            f"  {spec:<16} wall {wall:6.2f} s  cpu {cpu:6.2f} s  {size / cpu:5.1f} MB/s  {verdict}"
        )


def overhead(model: str, task: str, perturbed: str, limit: int, repeats: int, bs: int) -> None:
    import lm_eval
    import torch
    from lm_eval.models.huggingface import HFLM

    from posgen.harness.embedded import resolve_pretrained
    from posgen.tasks.lm_eval_tasks import task_manager

    if hasattr(os, "sched_setaffinity"):  # undo the one-core pin of the throughput part
        os.sched_setaffinity(0, set(range(os.cpu_count() or 1)))
    torch.set_num_threads(os.cpu_count() or 1)
    tm = task_manager()
    lm = HFLM(pretrained=resolve_pretrained(model), dtype="float32", device="cpu", batch_size=bs)
    names = {"unperturbed": task, "perturbed": f"{perturbed}_{task}"}
    wall: dict[str, list[float]] = {k: [] for k in names}
    cpu: dict[str, list[float]] = {k: [] for k in names}
    for _ in range(repeats):
        for kind, name in names.items():
            t, c = time.perf_counter(), time.process_time()
            lm_eval.simple_evaluate(model=lm, tasks=[name], task_manager=tm, limit=limit)
            wall[kind].append(time.perf_counter() - t)
            cpu[kind].append(time.process_time() - c)
    print(
        f"overhead: {task} vs {names['perturbed']} on {model}, limit {limit}, batch {bs}, "
        f"{repeats} interleaved repeats"
    )
    for kind in names:
        print(
            f"  {kind:<12} wall {statistics.median(wall[kind]):7.2f} s  "
            f"cpu {statistics.median(cpu[kind]):7.2f} s  (runs: "
            + ", ".join(f"{w:.2f}" for w in wall[kind])
            + ")"
        )
    for label, d in (("wall", wall), ("cpu", cpu)):
        ratio = statistics.median(d["perturbed"]) / statistics.median(d["unperturbed"])
        print(
            f"  ratio perturbed/unperturbed ({label}): {ratio:.3f}  "
            f"{'ok' if ratio <= 1.05 else 'ABOVE 1.05'}"
        )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--mb", type=float, default=10.0)
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--task", default="posgen_cloze")
    ap.add_argument("--perturbation", default="perm_swap_5pct")
    ap.add_argument("--limit", type=int, default=48)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--skip-model", action="store_true", help="throughput only")
    args = ap.parse_args()
    throughput(args.mb)
    if not args.skip_model:
        overhead(
            args.model, args.task, args.perturbation, args.limit, args.repeats, args.batch_size
        )


if __name__ == "__main__":
    main()
