"""What the default evidence-depth sweep costs: one cell of each built-in depth task in
each form, timed on one loaded model, and the sweep estimated from them.

The default sweep is both forms × the five default depths × the four built-in tasks
(``posgen_kv``, ``posgen_kv_mc``, ``posgen_kv_gen``, ``posgen_passage_qa``): 10 cells per
task. A text cell is ``perm_depth_50pct_<task>`` (the documents reordered); a position
cell runs the same tokens in their own order, so its forward costs what the task's
unperturbed cell costs: that cell stands in for it here (the position ids of
``positions=depth:D`` are planned per row from the document's passages; that planning is
not timed). Each cell is one ``simple_evaluate`` as ``posgen run`` calls it
(``hf-posgen``, batch 8, fp32, greedy generation as the task's YAML says).

Printed: wall and CPU seconds per cell (medians over repeats), the cell's primary metric,
and the sweep ``Σ_task 5 t_text + 5 t_position``, in wall time and in CPU time over
torch's threads (on a loaded machine the wall time says little; CPU time / threads is
what idle cores would take if the threads keep them busy).

    python benchmarks/bench_depth_cell.py [--model embedded|PATH] [--repeats 1]
        [--batch-size 8] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

DEPTHS_PER_FORM = 5  # posgen.perturbations.depth.DEFAULT_DEPTHS
PRIMARY = ("acc,none", "exact_match,first-word")


def time_cell(lm, tm, task: str) -> tuple[float, float, float]:
    """(wall s, cpu s, primary metric) of one cell."""
    import lm_eval

    t, c = time.perf_counter(), time.process_time()
    out = lm_eval.simple_evaluate(model=lm, tasks=[task], task_manager=tm, bootstrap_iters=0)
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    res = out["results"][task]
    return wall, cpu, float(next(res[k] for k in PRIMARY if k in res))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=8)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    import torch

    from posgen.harness.hf_posgen.model import HFPosgenLM
    from posgen.tasks import depth_suite
    from posgen.tasks.lm_eval_tasks import task_manager

    torch.set_num_threads(args.threads)
    tm = task_manager()
    lm = HFPosgenLM(
        pretrained=args.model, dtype="float32", device="cpu", batch_size=args.batch_size
    )
    cells = [c for t in depth_suite.TASKS for c in (f"perm_depth_50pct_{t}", t)]
    runs: dict[str, list[tuple[float, float, float]]] = {c: [] for c in cells}
    for _ in range(args.repeats):
        for cell in cells:
            runs[cell].append(time_cell(lm, tm, cell))
    print(
        f"{args.model}, batch {args.batch_size}, {args.threads} torch thread(s), "
        f"{os.cpu_count()} CPUs, {args.repeats} repeat(s) (medians); load average "
        f"{os.getloadavg()[0]:.1f}"
    )
    wall = {c: statistics.median(w for w, _, _ in rows) for c, rows in runs.items()}
    cpu = {c: statistics.median(u for _, u, _ in rows) for c, rows in runs.items()}
    for cell, rows in runs.items():
        form = "text" if cell.startswith("perm_") else "position (stand-in)"
        print(
            f"  {cell:<34} {form:<20} wall {wall[cell]:7.2f} s  cpu {cpu[cell]:7.2f} s  "
            f"primary {rows[0][2]:.3f}"
        )
    sweep = DEPTHS_PER_FORM * sum(wall.values())
    sweep_cpu = DEPTHS_PER_FORM * sum(cpu.values())
    print(
        f"  default depth sweep ({2 * DEPTHS_PER_FORM * len(depth_suite.TASKS)} cells): "
        f"wall {sweep / 60:.1f} min, CPU {sweep_cpu / 60:.1f} min "
        f"(/ 2 idle cores: {sweep_cpu / 120:.1f} min)"
    )


if __name__ == "__main__":
    main()
