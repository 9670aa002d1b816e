"""Train small causal LMs of each position family on the same data and steps, for the
comparison of position families (docs/position-families.md).

Families (posgen.harness.position_family): ``rope`` (Llama), ``alibi`` (BLOOM),
``absolute`` (GPT-2's learned table), ``none`` (SmolLM3 with every layer NoPE). Only
``rope`` and ``none`` differ in their position encoding alone (SmolLM3 is Llama's
architecture with RoPE switched off per layer); transformers has no ALiBi or learned
table in that architecture, so ``alibi`` and ``absolute`` are BLOOM's and GPT-2's own
blocks (LayerNorm, GELU MLP, biases): compare them with that in mind. What the script
holds equal: ``--layers`` layers of width ``--width`` with ``--heads`` heads (no grouped
keys), tied input and output embeddings, no dropout (GPT-2's default 0.1 is switched
off), an MLP of about 8·width² weights per layer (4·width for GELU, 8·width/3 for
SwiGLU), the tests' byte-level BPE tokenizer (384 entries), a trained context of exactly
``--window`` tokens (GPT-2's table has that many rows; every saved config and tokenizer
says so, so lm-eval scores longer documents in windows of that length), the data, the
seeded order of its windows, and AdamW with the same schedule (``--warmup`` linear
steps, then cosine to a tenth of ``--lr``; gradients clipped to norm ``--clip``).

Data: the pydoc topic pages that ship with Python, the last 10 topics held out. The
offline suite (``posgen run``) draws some of its documents from the prose paragraphs of
other topics; those paragraphs are removed from the training text
(``--no-exclude-suite``: keep them), so no scored document was trained on.

Each trained model is saved under ``OUT/<family>`` (a folder ``--model`` of the
``posgen`` commands takes) with ``training.json`` (the arguments and figures), and one
line per family gives its weights, its training wall time, its held-out loss and that
loss under ``positions=swap:0.2`` through hf-posgen's own path (the batch plan and the
family's hooks), so the table says whether positions matter to it at all::

    python benchmarks/train_position_families.py --out runs/families
    python benchmarks/train_position_families.py --out runs/families --twins

(``--twins`` trains nothing: it gives the same two losses for each saved model's
random-init twin, drawn as ``posgen run --random-init`` draws it.)
Then ``posgen run --quick --random-init --model OUT/rope --model OUT/alibi ...``,
``posgen decompose --model OUT/alibi --random-init`` and ``posgen layers --model
OUT/rope`` (docs/position-families.md has the commands and the measured figures).
Sizes are small on purpose: 2 shared CPU cores.
"""

from __future__ import annotations

import argparse
import json
import math
import re
import sys
import time
from pathlib import Path

import torch
from transformers import AutoConfig, AutoModelForCausalLM

# the tests' tiny configs and tokenizer, without PYTHONPATH=tests
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from tiny_models import CONFIGS, MODEL_TYPES, build_tokenizer

FAMILIES = {"rope": "llama", "alibi": "bloom", "absolute": "gpt2", "none": "smollm3_nope"}
HELD_OUT = 10  # the last pydoc topics: never trained on


def family_config(arch: str, args: argparse.Namespace) -> dict:
    """``arch``'s tiny config resized to the comparison's shape (see the module doc)."""
    d, n_layers, heads, context = args.width, args.layers, args.heads, args.window
    base = CONFIGS[arch]
    if arch == "gpt2":
        drop = dict(resid_pdrop=0.0, embd_pdrop=0.0, attn_pdrop=0.0)
        return dict(base, n_embd=d, n_layer=n_layers, n_head=heads, n_positions=context, **drop)
    if arch == "bloom":  # no dropout and tied embeddings by default; ALiBi needs no context
        return dict(base, hidden_size=d, n_layer=n_layers, n_head=heads)
    gated = 8 * (d // 3 + (d % 3 > 0))  # SwiGLU's 3·d·I weights ≈ GELU's 2·d·4d
    cfg = dict(
        base,
        hidden_size=d,
        intermediate_size=gated,
        num_hidden_layers=n_layers,
        num_attention_heads=heads,
        num_key_value_heads=heads,
        max_position_embeddings=context,
        tie_word_embeddings=True,
    )
    if arch == "smollm3_nope":
        cfg["no_rope_layers"] = [0] * n_layers
    return cfg


def build(arch: str, args: argparse.Namespace) -> torch.nn.Module:
    """A seeded float32 model of ``arch`` in the comparison's shape."""
    cfg = AutoConfig.for_model(MODEL_TYPES.get(arch, arch), **family_config(arch, args))
    torch.manual_seed(args.seed)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32)


def pydoc_texts(exclude_suite: bool) -> tuple[list[str], list[str]]:
    """(training, held-out) topic texts; with ``exclude_suite`` the prose paragraphs
    the offline suite's pydoc documents are drawn from are cut out of the training ones
    (``posgen.tasks.corpora.pydoc_paragraphs`` is how the suite chose them)."""
    from pydoc_data.topics import topics

    from posgen.tasks.corpora import pydoc_paragraphs
    from posgen.tasks.offline import TASKS, load_rows

    used = {r["origin"] for t in TASKS for r in load_rows(f"{t}.jsonl") if r["source"] == "pydoc"}
    scored = {p for topic, p in pydoc_paragraphs() if topic in used} if exclude_suite else set()
    keys = sorted(topics)

    def kept(text: str) -> str:
        blocks = re.split(r"\n\s*\n", text)
        return "\n\n".join(b for b in blocks if " ".join(b.split()) not in scored)

    return [kept(topics[k]) for k in keys[:-HELD_OUT]], [topics[k] for k in keys[-HELD_OUT:]]


def windows(ids: torch.Tensor, count: int, width: int, gen: torch.Generator) -> torch.Tensor:
    """``count`` random windows ``[count, width]`` of the token stream ``ids``."""
    starts = torch.randint(0, ids.numel() - width - 1, (count,), generator=gen)
    return torch.stack([ids[s : s + width] for s in starts.tolist()])


def learning_rate(step: int, args: argparse.Namespace) -> float:
    """Linear warmup over ``args.warmup`` steps, then cosine from ``lr`` to ``lr/10``."""
    if step < args.warmup:
        return args.lr * (step + 1) / args.warmup
    t = (step - args.warmup) / max(1, args.steps - args.warmup)
    return args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * t)))


def train(model: torch.nn.Module, ids: torch.Tensor, args: argparse.Namespace) -> list[float]:
    """``args.steps`` AdamW steps on seeded windows of ``ids``; the mean training loss
    of each ``args.log_every`` steps."""
    model.train()
    gen = torch.Generator().manual_seed(args.seed)
    opt = torch.optim.AdamW(model.parameters(), lr=args.lr, weight_decay=args.weight_decay)
    losses, logged = [], []
    for step in range(args.steps):
        for group in opt.param_groups:
            group["lr"] = learning_rate(step, args)
        batch = windows(ids, args.batch, args.window, gen)
        loss = model(batch, labels=batch).loss
        opt.zero_grad()
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
        opt.step()
        losses.append(loss.item())
        if (step + 1) % args.log_every == 0 or step + 1 == args.steps:
            logged.append(sum(losses) / len(losses))
            print(f"  step {step + 1:5d}  train loss {logged[-1]:.4f}", flush=True)
            losses = []
    model.eval()
    return logged


def held_out_loss(model: torch.nn.Module, ids: torch.Tensor, window: int, spec: str | None):
    """Mean next-token loss on consecutive held-out windows, plain or under ``spec``."""
    from posgen.harness.hf_posgen.batch_rows import NO_DOCS, PaddedRows
    from posgen.harness.model_side import door
    from posgen.harness.model_side.perturbation import ModelPerturbation

    usable = ids[: ids.numel() // window * window].view(-1, window)[:64]
    with torch.no_grad():
        if spec is None:
            with door.forward(model):
                return float(model(usable, labels=usable).loss)
        p = ModelPerturbation.parse(spec, None, 1234, None, None, None)
        n = usable.shape[0]
        rows = PaddedRows([window] * n, [window] * n, [NO_DOCS] * n, [None] * n)
        with door.forward(model, p, door.plan_forward(usable, p, rows)):
            return float(model(usable, labels=usable).loss)


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=Path, required=True)
    parser.add_argument("--families", default=",".join(FAMILIES))
    parser.add_argument("--layers", type=int, default=4)
    parser.add_argument("--width", type=int, default=128)
    parser.add_argument("--heads", type=int, default=4)
    parser.add_argument("--window", type=int, default=256, help="training window = context")
    parser.add_argument("--steps", type=int, default=600)
    parser.add_argument("--batch", type=int, default=8)
    parser.add_argument("--lr", type=float, default=3e-3)
    parser.add_argument("--warmup", type=int, default=50)
    parser.add_argument("--weight-decay", type=float, default=0.01)
    parser.add_argument("--clip", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2, help="torch CPU threads")
    parser.add_argument("--log-every", type=int, default=100)
    parser.add_argument(
        "--twins",
        action="store_true",
        help="no training: score the random-init twins (posgen's, weights from --twin-seed) "
        "of the models saved under OUT",
    )
    parser.add_argument("--twin-seed", type=int, default=1234, help="posgen run's default seed")
    parser.add_argument(
        "--exclude-suite",
        action=argparse.BooleanOptionalAction,
        default=True,
        help="cut the offline suite's pydoc paragraphs out of the training text",
    )
    args = parser.parse_args()
    unknown = [f for f in args.families.split(",") if f not in FAMILIES]
    if unknown:
        parser.error(f"--families: {unknown} not in {sorted(FAMILIES)}")
    return args


def score_twins(args: argparse.Namespace, test_ids: torch.Tensor) -> None:
    """Held-out loss, plain and under swap:0.2, of each saved model's random-init twin,
    drawn as ``posgen run --random-init`` draws it (same seed and name)."""
    from posgen.harness.loading.load import random_init_twin

    print("family    twin loss  twin loss_swap0.2")
    for family in args.families.split(","):
        path = args.out / family
        twin = random_init_twin(
            AutoConfig.from_pretrained(path), seed=args.twin_seed, name=str(path)
        )
        plain = held_out_loss(twin, test_ids, args.window, None)
        spec = None if family == "none" else "swap:0.2"
        s = "(none)" if spec is None else f"{held_out_loss(twin, test_ids, args.window, spec):.4f}"
        print(f"{family:9} {plain:.4f}     {s}")


def main() -> None:
    args = parse_args()
    torch.set_num_threads(args.threads)
    tok = build_tokenizer()
    tok.model_max_length = args.window  # lm-eval's context for BLOOM, whose config has none
    train_texts, test_texts = pydoc_texts(args.exclude_suite)
    train_ids = torch.tensor(tok("\n".join(train_texts))["input_ids"])
    test_ids = torch.tensor(tok("\n".join(test_texts))["input_ids"])
    if args.twins:
        score_twins(args, test_ids)
        return
    print(f"training tokens {train_ids.numel()}, held-out tokens {test_ids.numel()}")
    rows = []
    for family in args.families.split(","):
        arch = FAMILIES[family]
        model = build(arch, args)
        weights = sum(p.numel() for p in model.parameters())
        print(f"{family} ({arch}, {weights} weights)", flush=True)
        start = time.perf_counter()
        logged = train(model, train_ids, args)
        wall = time.perf_counter() - start
        model.save_pretrained(args.out / family)
        tok.save_pretrained(args.out / family)
        plain = held_out_loss(model, test_ids, args.window, None)
        swapped = (
            None if family == "none" else held_out_loss(model, test_ids, args.window, "swap:0.2")
        )
        record = dict(
            family=family,
            arch=arch,
            weights=weights,
            wall_s=round(wall, 1),
            train_loss=logged,
            held_out_loss=plain,
            held_out_loss_swap_0_2=swapped,
            args={k: str(v) for k, v in vars(args).items()},
        )
        (args.out / family / "training.json").write_text(json.dumps(record, indent=2) + "\n")
        rows.append(record)
    print("family    arch          weights  steps  wall_s  loss    loss_swap0.2")
    for r in rows:
        s = (
            "(none)"
            if r["held_out_loss_swap_0_2"] is None
            else f"{r['held_out_loss_swap_0_2']:.4f}"
        )
        print(
            f"{r['family']:9} {r['arch']:13} {r['weights']:7d}  {args.steps:5d}  "
            f"{r['wall_s']:6.0f}  {r['held_out_loss']:.4f}  {s}"
        )


if __name__ == "__main__":
    main()
