"""Perplexity curves: position swap and rope noise (model side) beside text swap, paired.

One ``hf-posgen`` model is loaded once; each cell switches its perturbation and evaluates
the offline perplexity task (``posgen_prose``; text cells use the shipped
``perm_swap_<r>pct_posgen_prose`` tasks with no model-side perturbation). Per document
lm-eval logs ``(log-likelihood, words)``; word perplexity is
``exp(−Σ ll / Σ words)`` over the documents, its stderr and the paired difference of
log word perplexity to the unperturbed cell come from one bootstrap over documents (the
same resampled documents for every cell).

Usage: python benchmarks/curve_model_perturbations.py [--pretrained embedded]
       [--limit N] [--batch-size 4] [--sigmas 0.5,1,2,4] [--out curve.json]
"""

from __future__ import annotations

import argparse
import json
import math
import time

import numpy as np

RATES = (0.0, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5)


def cells(sigmas: list[float]) -> list[tuple[str, str, dict]]:
    """(label, task, model-side perturbation) for every cell of the table. Rate 0 of
    either swap is the unperturbed cell itself (tested bit-identical), so it is run once."""
    rates = [r for r in RATES if r > 0]
    out = [("none (swap:0)", "posgen_prose", {})]
    out += [(f"position swap:{r:g}", "posgen_prose", {"positions": f"swap:{r!r}"}) for r in rates]
    out += [
        (f"rope_noise:{s:g}", "posgen_prose", {"features": f"rope_noise:{s!r}"}) for s in sigmas
    ]
    out += [
        (f"text swap:{r:g}", f"perm_swap_{round(r * 100):d}pct_posgen_prose", {}) for r in rates
    ]
    return out


def per_doc(samples: list[dict]) -> dict[str, tuple[float, int]]:
    return {s["doc"]["doc_id"]: tuple(s["word_perplexity"]) for s in samples}


def summarize(table: dict[str, dict[str, tuple[float, int]]], iters: int = 2000) -> list[dict]:
    """Word perplexity, bootstrap stderr and paired Δ log-ppl vs the first (unperturbed) cell."""
    base_label = next(iter(table))
    docs = sorted(table[base_label])
    rng = np.random.default_rng(0)
    idx = rng.integers(0, len(docs), size=(iters, len(docs)))

    def log_ppl(label: str) -> tuple[float, np.ndarray]:
        ll = np.array([table[label][d][0] for d in docs])
        words = np.array([table[label][d][1] for d in docs], dtype=float)
        return -ll.sum() / words.sum(), -ll[idx].sum(1) / words[idx].sum(1)

    base, base_boot = log_ppl(base_label)
    rows = []
    for label in table:
        point, boot = log_ppl(label)
        ppl = math.exp(point)
        rows.append(
            {
                "cell": label,
                "word_perplexity": ppl,
                "stderr": float(np.std(np.exp(boot), ddof=1)),
                "delta_log_ppl": point - base,
                "delta_stderr": float(np.std(boot - base_boot, ddof=1)),
                "n_docs": len(docs),
            }
        )
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pretrained", default="embedded")
    ap.add_argument("--limit", type=int, default=None)
    ap.add_argument("--batch-size", type=int, default=4)
    ap.add_argument("--sigmas", default="0.5,1,2,4")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--out", default=None)
    args = ap.parse_args()

    import lm_eval

    from posgen.harness.hf_posgen.model import HFPosgenLM
    from posgen.tasks.lm_eval_tasks import task_manager

    tm = task_manager()
    lm = HFPosgenLM(pretrained=args.pretrained, device="cpu", batch_size=args.batch_size)
    table: dict[str, dict[str, tuple[float, int]]] = {}
    for label, task, spec in cells([float(s) for s in args.sigmas.split(",")]):
        start = time.perf_counter()
        lm.set_perturbation(spec.get("positions"), spec.get("features"), seed=args.seed)
        res = lm_eval.simple_evaluate(
            model=lm,
            tasks=[task],
            task_manager=tm,
            limit=args.limit,
            log_samples=True,
            bootstrap_iters=0,
        )
        table[label] = per_doc(res["samples"][task])
        if set(table[label]) != set(next(iter(table.values()))):
            raise SystemExit(f"{label}: documents differ from the first cell; not paired")
        if args.out:  # after every cell, so an interrupted run keeps what it measured
            with open(args.out + ".cells.json", "w") as f:
                json.dump({k: {d: list(v) for d, v in t.items()} for k, t in table.items()}, f)
        ppl = res["results"][task]["word_perplexity,none"]
        print(
            f"{label:24s} {task:32s} word_ppl={ppl:10.4f} ({time.perf_counter() - start:.0f}s)",
            flush=True,
        )
    rows = summarize(table)
    print("\n| cell | word_perplexity | stderr | Δ log ppl vs none (paired) |")
    print("|---|---:|---:|---:|")
    for r in rows:
        print(
            f"| {r['cell']} | {r['word_perplexity']:.3f} | {r['stderr']:.3f} | "
            f"{r['delta_log_ppl']:+.4f} ± {r['delta_stderr']:.4f} |"
        )
    if args.out:
        with open(args.out, "w") as f:
            json.dump({"rows": rows, "args": vars(args)}, f, indent=1)


if __name__ == "__main__":
    main()
