"""The gate on real checkpoints of the embedded model, with the same seed: a nearby one
that must pass and a damaged one that must fail.

Both are built here, at run time (never shipped), from the embedded model
(SmolLM2-135M):

- nearby: after ``--steps`` seeded AdamW steps (lr ``--lr``) on windows of the
  Britannica text shipped with posgen (not the documents the suite scores), as a team's
  next checkpoint differs from its last release;
- damaged: seeded Gaussian noise on the query and key projections of six layers
  (``--damage-layers``, default the first six; ``W += --damage-scale · std(W) · N(0,
  1)``), which raises the unperturbed perplexity by several percent while no
  perturbed/unperturbed ratio is shown worse (the text cells' ratios fall): a worse model
  that a gate of the perturbed cells alone passes.

All three are swept by ``posgen run`` with the same seed, so they see identical
perturbations per document; then:

- the per-document correlation of ``g_d`` between the embedded model and each candidate
  (per cell, the unperturbed cell's ``g`` being the NLL per word; and pooled over the
  perturbed cells after removing each cell's mean);
- the paired spread ``sd(δ)`` per cell (``δ_d = g_candidate,d - g_embedded,d``), the
  noise that sets the default margins (:mod:`posgen.results.gate.margins`);
- ``posgen check`` of each candidate against a baseline of the embedded model (printed
  as the gate prints it), of a same-seed rerun of the embedded model against its own
  baseline (the same run folder: a same-seed run is deterministic), of the nearby one
  with ``--margin-ppl 0``, and of the damaged one with the unperturbed cells' margin out
  of the way (``--margin-base-ppl 1000``: what a gate of the perturbed cells alone says).

Stages resume: a finished run folder is reused (``posgen run`` skips finished cells).

    OMP_NUM_THREADS=2 nice python benchmarks/gate_nearby_checkpoint.py \
        --work posgen-runs/nearby --suite posgen_prose --rates 0,0.05,0.2 --sigmas 0,1
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
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
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
    _save(model, tok, Path(src), folder)
    return folder


def build_damaged(folder: Path, layers: tuple[int, ...], scale: float, seed: int) -> Path:
    """The embedded model with seeded Gaussian noise added to the query and key
    projections of ``layers``: ``W += scale · std(W) · N(0, 1)`` per matrix (one
    generator seeded with ``seed``, layers in order, q then k), saved to ``folder``."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from posgen.harness.embedded import embedded_model_path

    if (folder / "config.json").is_file():
        return folder
    src = embedded_model_path()
    model = AutoModelForCausalLM.from_pretrained(src, dtype=torch.float32)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for i in layers:
            attn = model.model.layers[i].self_attn
            for proj in (attn.q_proj, attn.k_proj):
                w = proj.weight
                w.add_(torch.randn(w.shape, generator=gen) * scale * w.std())
    _save(model, AutoTokenizer.from_pretrained(src), Path(src), folder)
    return folder


def _save(model, tok, src: Path, folder: Path) -> None:
    tmp = folder.with_name(folder.name + ".tmp")
    model.save_pretrained(tmp)
    tok.save_pretrained(tmp)
    for extra in ("chat_template.jinja", "generation_config.json"):
        if (src / extra).is_file() and not (tmp / extra).is_file():
            (tmp / extra).write_bytes((src / extra).read_bytes())
    tmp.rename(folder)


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
    """``{(task, metric, kind, scheme, rate): {doc_key: (w, g)}}`` of a run's only model,
    on each task's primary metric as the gate reads it (the unperturbed cell under kind
    ``none``, ``g`` its NLL per word), and the unperturbed word perplexity per task."""
    from posgen.results.gate.check import gate_payload

    payload = gate_payload(run)
    out = {
        (c["task"], c["metric"], c["kind"], c["scheme"], c["rate"]): dict(
            zip(c["docs"]["keys"], zip(c["docs"]["w"], c["docs"]["g"], strict=True), strict=True)
        )
        for c in payload["cells"]
    }
    for e in payload["base"]:
        g = [-v for v in e["docs"]["v"]]
        out[(e["task"], e["metric"], "none", "none", 0.0)] = dict(
            zip(e["docs"]["keys"], zip(e["docs"]["w"], g, strict=True), strict=True)
        )
    return out, {e["task"]: e["value"] for e in payload["base"]}


def correlations(base: dict, cand: dict, label: str) -> None:
    """Per cell: ρ of g between the checkpoints, the change Δ and the paired spread."""
    from posgen.results.stats.paired_test import weighted_paired_t

    print(f"\n{label}, per cell (nats/word; same seed: both runs saw identical perturbations):")
    print(
        f"  {'cell':<44} {'n':>3} {'rho':>6} {'sd(g)':>7} {'change':>8} {'%':>7} {'sd(delta)':>9}"
    )
    pooled = []
    for key in sorted(base, key=lambda k: (k[2] != "none", str(k))):
        docs = sorted(base[key])
        w = np.array([base[key][d][0] for d in docs])
        gb = np.array([base[key][d][1] for d in docs])
        gn = np.array([cand[key][d][1] for d in docs])
        rho = float(np.corrcoef(gb, gn)[0, 1]) if gb.std() > 0 and gn.std() > 0 else math.nan
        t = weighted_paired_t(gn - gb, w)
        sd = t["se"] * math.sqrt(t["n"])
        name = "/".join(map(str, key[:4])) + f"@{key[4]:g}"
        print(
            f"  {name:<44} {t['n']:>3} {rho:>6.3f} {gb.std(ddof=1):>7.4f} "
            f"{t['change']:>+8.4f} {100 * math.expm1(t['change']):>+7.2f} {sd:>9.4f}"
        )
        if key[2] != "none":
            pooled.append((gb - gb.mean(), gn - gn.mean()))
    x = np.concatenate([a for a, _ in pooled])
    y = np.concatenate([b for _, b in pooled])
    print(
        f"  pooled over perturbed cells (each cell's mean removed): rho = {np.corrcoef(x, y)[0, 1]:.4f}"
    )


def measure(work: Path) -> None:
    runs = {name: work / f"run-{name}" for name in ("embedded", "nearby", "damaged")}
    docs, ppl = {}, {}
    for name, run in runs.items():
        docs[name], ppl[name] = per_document(run)
    print(
        "\nunperturbed word perplexity: "
        + "; ".join(
            f"{name} {', '.join(f'{t} {v:.1f}' for t, v in p.items())}" for name, p in ppl.items()
        )
    )
    correlations(docs["embedded"], docs["nearby"], "nearby vs embedded")
    correlations(docs["embedded"], docs["damaged"], "damaged vs embedded")
    baseline = work / "baseline-embedded.json"
    check = ("check", "--baseline", str(baseline))
    for argv in (
        ("baseline", str(runs["embedded"]), "-o", str(baseline)),
        (*check, str(runs["embedded"])),
        (*check, str(runs["nearby"])),
        (*check, str(runs["nearby"]), "--margin-ppl", "0"),
        (*check, str(runs["damaged"])),
        (*check, str(runs["damaged"]), "--margin-base-ppl", "1000"),
    ):
        res = posgen(*argv)
        print(res.stdout + res.stderr + f"(exit {res.returncode})\n", flush=True)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--work", type=Path, default=Path("posgen-runs/nearby"))
    p.add_argument("--steps", type=int, default=4)
    p.add_argument("--lr", type=float, default=1e-5)
    p.add_argument("--seed", type=int, default=1234, help="perturbation seed of both runs")
    p.add_argument("--train-seed", type=int, default=0, help="seed of the steps and the noise")
    p.add_argument("--damage-layers", default="0,1,2,3,4,5", help="layers whose q/k get noise")
    p.add_argument("--damage-scale", type=float, default=0.3, help="noise sd / weight sd")
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
        layers = tuple(int(x) for x in args.damage_layers.split(","))
        print(f"damaged checkpoint: noise {args.damage_scale} x std on q/k of layers {layers}")
        damaged = build_damaged(
            args.work / "damaged-model", layers, args.damage_scale, args.train_seed
        )
        sweep(str(damaged), args.work / "run-damaged", args)
    if args.stage in ("all", "measure"):
        measure(args.work)


if __name__ == "__main__":
    main()
