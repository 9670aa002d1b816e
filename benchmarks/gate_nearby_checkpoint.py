"""The gate on two real nearby checkpoints of the embedded model, with the same seed.

A nearby checkpoint is built here, at run time (never shipped): the embedded model
(SmolLM2-135M) after ``--steps`` seeded AdamW steps (lr ``--lr``) on windows of the
Britannica text shipped with posgen (not the documents the suite scores), as a team's
next checkpoint differs from its last release. Both checkpoints are swept by ``posgen
run`` with the same seed, so both see identical perturbations per document; then:

- the per-document correlation of degradations ``g_d`` between the two checkpoints
  (per cell, and pooled over the cells of each metric after removing each cell's mean);
- the paired spread ``sd(δ)`` per cell (``δ_d = g_nearby,d - g_embedded,d``), the
  noise that sets the default margins (:mod:`posgen.results.gate.margins`);
- ``posgen check`` of the nearby checkpoint against a baseline of the embedded model
  (printed as the gate prints it), and of a same-seed rerun of the embedded model
  against its own baseline (the same run folder: a same-seed run is deterministic).

Stages resume: a finished run folder is reused (``posgen run`` skips finished cells).

    OMP_NUM_THREADS=2 nice python benchmarks/gate_nearby_checkpoint.py \
        --work posgen-runs/nearby [--quick] [--kinds text,position,feature]
"""

from __future__ import annotations

import argparse
import math
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

TEXT = Path(__file__).resolve().parents[1] / "src/posgen/tasks/data/britannica_11th_shakespeare.txt"


def build_nearby(folder: Path, steps: int, lr: float, seed: int, tokens: int = 256) -> Path:
    """The embedded model after ``steps`` AdamW steps on 4 windows of ``tokens`` tokens of
    the Britannica text each (window starts drawn from ``seed``), saved to ``folder``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from posgen.harness.embedded import embedded_model_path

    if (folder / "config.json").is_file():
        return folder
    src = embedded_model_path()
    tok = AutoTokenizer.from_pretrained(src)
    model = AutoModelForCausalLM.from_pretrained(src, torch_dtype=torch.float32)
    ids = tok(TEXT.read_text(encoding="utf-8"), return_tensors="pt")["input_ids"][0]
    gen = torch.Generator().manual_seed(seed)
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
    model.train()
    for step in range(steps):
        starts = torch.randint(0, ids.numel() - tokens, (4,), generator=gen)
        batch = torch.stack([ids[s : s + tokens] for s in starts.tolist()])
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        opt.step()
        opt.zero_grad()
        print(f"  step {step + 1}/{steps}: training loss {loss.item():.4f}", flush=True)
    model.eval()
    tmp = folder.with_name(folder.name + ".tmp")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    for extra in ("chat_template.jinja", "generation_config.json"):
        if (Path(src) / extra).is_file() and not (tmp / extra).is_file():
            (tmp / extra).write_bytes((Path(src) / extra).read_bytes())
    tmp.rename(folder)
    return folder


def posgen(*argv: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "posgen", *argv]
    print("$ posgen " + " ".join(argv), flush=True)
    return subprocess.run(cmd, capture_output=True, text=True)


def sweep(model: str, out: Path, args: argparse.Namespace) -> None:
    extra = ["--quick"] if args.quick else []
    for flag in ("suite", "limit", "rates", "sigmas", "kinds"):
        if getattr(args, flag) is not None:
            extra += [f"--{flag}", str(getattr(args, flag))]
    t0 = time.perf_counter()
    res = posgen("run", "--model", model, "--out", str(out), "--seed", str(args.seed), *extra)
    if res.returncode != 0:
        raise SystemExit(f"posgen run failed ({res.returncode}):\n{res.stderr[-3000:]}")
    print(f"  {time.perf_counter() - t0:.0f} s (machine shared and loaded)", flush=True)


def per_document(run: Path):
    """``{(task, metric, kind, scheme, rate): {doc_key: g}}`` of a run's only model, on
    each task's primary metric (as the gate stores it)."""
    from posgen.results.gate.check import baseline_payload

    payload = baseline_payload(run)
    return {
        (c["task"], c["metric"], c["kind"], c["scheme"], c["rate"]): dict(
            zip(c["docs"]["keys"], zip(c["docs"]["w"], c["docs"]["g"], strict=True), strict=True)
        )
        for c in payload["cells"]
    }


def correlations(base: dict, near: dict) -> None:
    """Per cell: ρ of g between the checkpoints, the change Δ and the paired spread."""
    from posgen.results.stats.paired_test import weighted_paired_t

    print("\nper cell (nats/word; same seed, so both runs saw identical perturbations):")
    print(f"  {'cell':<44} {'n':>3} {'rho':>6} {'sd(g)':>7} {'change':>8} {'sd(delta)':>9}")
    pooled = []
    for key in sorted(base, key=str):
        docs = sorted(base[key])
        w = np.array([base[key][d][0] for d in docs])
        gb = np.array([base[key][d][1] for d in docs])
        gn = np.array([near[key][d][1] for d in docs])
        rho = float(np.corrcoef(gb, gn)[0, 1]) if gb.std() > 0 and gn.std() > 0 else math.nan
        t = weighted_paired_t(gn - gb, w)
        sd = t["se"] * math.sqrt(t["n"])
        name = "/".join(map(str, key[:4])) + f"@{key[4]:g}"
        print(
            f"  {name:<44} {t['n']:>3} {rho:>6.3f} {gb.std(ddof=1):>7.4f} "
            f"{t['change']:>+8.4f} {sd:>9.4f}"
        )
        pooled.append((gb - gb.mean(), gn - gn.mean()))
    x = np.concatenate([a for a, _ in pooled])
    y = np.concatenate([b for _, b in pooled])
    print(f"  pooled over cells (each cell's mean removed): rho = {np.corrcoef(x, y)[0, 1]:.4f}")


def measure(work: Path) -> None:
    runs = {name: work / f"run-{name}" for name in ("embedded", "nearby")}
    base, near = per_document(runs["embedded"]), per_document(runs["nearby"])
    correlations(base, near)
    baseline = work / "baseline-embedded.json"
    for argv in (
        ("baseline", str(runs["embedded"]), "-o", str(baseline)),
        ("check", str(runs["embedded"]), "--baseline", str(baseline)),
        ("check", str(runs["nearby"]), "--baseline", str(baseline)),
        ("check", str(runs["nearby"]), "--baseline", str(baseline), "--margin-ppl", "0"),
    ):
        res = posgen(*argv)
        print(res.stdout + res.stderr + f"(exit {res.returncode})\n", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, default=Path("posgen-runs/nearby"))
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--seed", type=int, default=1234, help="perturbation seed of both runs")
    p.add_argument("--train-seed", type=int, default=0)
    p.add_argument("--quick", action="store_true", help="posgen run --quick (6 prose docs)")
    p.add_argument("--kinds", help="posgen run --kinds (default: all three)")
    p.add_argument("--suite", help="posgen run --suite (default: offline)")
    p.add_argument("--limit", type=int, help="posgen run --limit")
    p.add_argument("--rates", help="posgen run --rates")
    p.add_argument("--sigmas", help="posgen run --sigmas")
    p.add_argument("--stage", choices=("all", "runs", "measure"), default="all")
    args = p.parse_args()
    args.work.mkdir(parents=True, exist_ok=True)
    if args.stage in ("all", "runs"):
        print(f"nearby checkpoint: {args.steps} AdamW steps, lr {args.lr}, seed {args.train_seed}")
        nearby = build_nearby(args.work / "nearby-model", args.steps, args.lr, args.train_seed)
        sweep("embedded", args.work / "run-embedded", args)
        sweep(str(nearby), args.work / "run-nearby", args)
    if args.stage in ("all", "measure"):
        measure(args.work)


if __name__ == "__main__":
    main()
