"""Train small causal LMs of each position family on the same data and steps, for the
comparison of position families.

Families (posgen.harness.position_family): ``rope`` (Llama), ``alibi`` (BLOOM),
``absolute`` (GPT-2's learned table), ``none`` (SmolLM3 with every layer NoPE). Only
``rope`` and ``none`` differ in their position encoding alone (SmolLM3 is Llama's
architecture with RoPE switched off per layer); transformers has no ALiBi or learned
table in that architecture, so ``alibi`` and ``absolute`` are BLOOM's and GPT-2's own
blocks (LayerNorm, GELU MLP, GPT-2's tied embeddings): compare them with that in mind.
Each has 2 layers, width 64, 4 heads, the tests' byte-level BPE tokenizer (384 entries)
and the same data: the pydoc topic pages that ship with Python, in windows of ``--window`` tokens
drawn by one seeded generator, Adam at ``--lr`` for ``--steps`` steps. Each trained model
is saved under ``OUT/<family>`` (a folder ``pretrained=`` and ``posgen`` commands take),
and one line per family gives its wall time, its held-out loss (the last 10 topics) and
that loss under ``positions=swap:0.2`` through hf-posgen's own path (the batch plan and
the family's hooks), so the table says whether positions matter to it at all::

    PYTHONPATH=src:tests python benchmarks/train_position_families.py --out runs/families \\
        --steps 600 --families absolute,alibi

Then ``posgen decompose --model runs/families/alibi --random-init`` and ``posgen run
--quick --model ...`` on each. Sizes are small on purpose: 2 shared CPU cores.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from tiny_models import CONFIGS, build_model, build_tokenizer, training_text

FAMILIES = {"rope": "llama", "alibi": "bloom", "absolute": "gpt2", "none": "smollm3_nope"}
HELD_OUT = 10  # the last pydoc topics: never trained on


def windows(ids: torch.Tensor, count: int, width: int, gen: torch.Generator) -> torch.Tensor:
    """``count`` random windows ``[count, width]`` of the token stream ``ids``."""
    starts = torch.randint(0, ids.numel() - width - 1, (count,), generator=gen)
    return torch.stack([ids[s : s + width] for s in starts.tolist()])


def train(arch: str, ids: torch.Tensor, args: argparse.Namespace) -> torch.nn.Module:
    """``arch``'s tiny model trained ``args.steps`` Adam steps on windows of ``ids``."""
    model = build_model(arch, seed=args.seed).train()
    gen = torch.Generator().manual_seed(args.seed)
    opt = torch.optim.Adam(model.parameters(), lr=args.lr)
    for _ in range(args.steps):
        batch = windows(ids, args.batch, args.window, gen)
        loss = model(batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        opt.step()
    return model.eval()


def held_out_loss(model: torch.nn.Module, ids: torch.Tensor, window: int, spec: str | None):
    """Mean next-token loss on consecutive held-out windows, plain or under ``spec``."""
    from posgen.harness.hf_posgen.batch_rows import NO_DOCS, PaddedRows
    from posgen.harness.hf_posgen.model_perturbation import ModelPerturbation
    from posgen.harness.hf_posgen.perturbed_forward import perturbed_forward, plan_forward

    usable = ids[: ids.numel() // window * window].view(-1, window)[:64]
    with torch.no_grad():
        if spec is None:
            return float(model(usable, labels=usable).loss)
        p = ModelPerturbation.parse(spec, None, 1234, None, None, None)
        n = usable.shape[0]
        rows = PaddedRows([window] * n, [window] * n, [NO_DOCS] * n, [None] * n)
        with perturbed_forward(model, p, plan_forward(usable, p, rows)):
            return float(model(usable, labels=usable).loss)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--window", type=int, default=64)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    tok = build_tokenizer()
    topics = training_text()
    train_ids = torch.tensor(tok("\n".join(topics[:-HELD_OUT]))["input_ids"])
    test_ids = torch.tensor(tok("\n".join(topics[-HELD_OUT:]))["input_ids"])
    print("family    arch          steps  wall_s  loss    loss_swap0.2")
    for family in args.families.split(","):
        arch = FAMILIES[family]
        assert arch in CONFIGS
        start = time.perf_counter()
        model = train(arch, train_ids, args)
        wall = time.perf_counter() - start
        model.save_pretrained(args.out / family)
        tok.save_pretrained(args.out / family)
        plain = held_out_loss(model, test_ids, args.window, None)
        swapped = (
            "(none)"
            if family == "none"
            else f"{held_out_loss(model, test_ids, args.window, 'swap:0.2'):.4f}"
        )
        print(f"{family:9} {arch:13} {args.steps:5d}  {wall:6.0f}  {plain:.4f}  {swapped}")


if __name__ == "__main__":
    main()
