"""What ``posgen_recall`` would add to the default run: one cell of each kind beside
``posgen_cloze``'s unperturbed cell, on the same loaded model, interleaved per repeat
(cloze, recall unperturbed, recall text, recall position, recall feature, cloze, ...).

Each cell is one ``simple_evaluate`` as ``posgen run`` calls it (``hf-posgen``, batch 8,
greedy generation as the task's YAML says; position and feature cells generate under
hf-posgen's perturbation). Printed: wall and CPU seconds per cell (medians over repeats),
the exact match of each recall cell, its time as a multiple of the cloze cell's, and the
estimate of what the task adds to the default run,
``t_none + 6 t_text + 6 t_position + 3 t_feature`` (the baseline, 6 text and 6 position
swap rates, 3 rope_noise sigmas: ``DEFAULT_RATES``/``DEFAULT_SIGMAS`` of
``posgen.harness.run.resolve``), in wall time and in CPU time over torch's threads (on a
loaded machine the wall time says little; the CPU time divided by the threads is what
idle cores would take, if the threads keep them busy).

    python benchmarks/bench_recall_cell.py [--model embedded|PATH] [--limit 48]
        [--repeats 3] [--batch-size 8]
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")

CLOZE_LIMIT = 48  # plan.LIMITS["default"]["posgen_cloze"]
# (label, lm-eval task, positions=, features=) of each timed cell
CELLS = (
    ("cloze unperturbed", "posgen_cloze", None, None),
    ("recall unperturbed", "posgen_recall", None, None),
    ("recall text swap 20%", "perm_swap_20pct_posgen_recall", None, None),
    ("recall position swap 20%", "posgen_recall", "swap:0.2", None),
    ("recall rope_noise 1", "posgen_recall", None, "rope_noise:1"),
)
# cells of each kind in the default run: baseline, text and position rates > 0, sigmas > 0
DEFAULT_COUNTS = {"recall unperturbed": 1, "recall text swap 20%": 6}
DEFAULT_COUNTS |= {"recall position swap 20%": 6, "recall rope_noise 1": 3}


def time_cell(lm, tm, cell: tuple, limit: int) -> tuple[float, float, float]:
    """(wall s, cpu s, primary metric) of one cell."""
    import lm_eval

    _, task, positions, features = cell
    lm.set_perturbation(positions, features)
    t, c = time.perf_counter(), time.process_time()
    out = lm_eval.simple_evaluate(
        model=lm, tasks=[task], task_manager=tm, limit=limit, bootstrap_iters=0
    )
    wall, cpu = time.perf_counter() - t, time.process_time() - c
    res = out["results"][task]
    value = res.get("exact_match,first-word", res.get("acc,none"))
    return wall, cpu, float(value)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="embedded")
    ap.add_argument("--limit", type=int, default=48, help="posgen_recall documents per cell")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--batch-size", type=int, default=8)
    args = ap.parse_args()
    import torch

    from posgen.harness.hf_posgen.model import HFPosgenLM
    from posgen.tasks.lm_eval_tasks import task_manager

    torch.set_num_threads(os.cpu_count() or 1)
    tm = task_manager()
    lm = HFPosgenLM(
        pretrained=args.model, dtype="float32", device="cpu", batch_size=args.batch_size
    )
    runs: dict[str, list[tuple[float, float, float]]] = {c[0]: [] for c in CELLS}
    for _ in range(args.repeats):
        for cell in CELLS:
            limit = CLOZE_LIMIT if cell[1] == "posgen_cloze" else args.limit
            runs[cell[0]].append(time_cell(lm, tm, cell, limit))
    print(
        f"{args.model}, batch {args.batch_size}, {os.cpu_count()} CPUs, recall "
        f"{args.limit} docs, {args.repeats} interleaved repeats (medians)"
    )
    wall = {label: statistics.median(w for w, _, _ in rows) for label, rows in runs.items()}
    cpu = {label: statistics.median(c for _, c, _ in rows) for label, rows in runs.items()}
    base = wall[CELLS[0][0]]
    for label, rows in runs.items():
        metric = "acc" if label.startswith("cloze") else "exact_match"
        print(
            f"  {label:<26} wall {wall[label]:7.2f} s  cpu {cpu[label]:7.2f} s  "
            f"{metric} {rows[0][2]:.3f}  x{wall[label] / base:.2f} of cloze"
        )
    added = sum(n * wall[label] for label, n in DEFAULT_COUNTS.items())
    added_cpu = sum(n * cpu[label] for label, n in DEFAULT_COUNTS.items())
    cells = sum(DEFAULT_COUNTS.values())
    print(
        f"  default run + posgen_recall: {cells} cells ~ {added / 60:.1f} min more "
        f"(CPU {added_cpu / 60:.1f} min, / {torch.get_num_threads()} threads "
        f"= {added_cpu / 60 / torch.get_num_threads():.1f} min on idle cores)"
    )


if __name__ == "__main__":
    main()
