"""Evidence-depth requests and a planted model for the tests of ``positions=depth:D``:
lm-eval ``Instance``s whose documents carry the field protocol's canonical fields, and a
GPT-2 whose next token is the token at one fixed position id."""

from __future__ import annotations

import torch
from lm_eval.api.instance import Instance
from transformers import AutoConfig, AutoModelForCausalLM

from tiny_models import VOCAB

PASSAGES = (
    ("river: stone", "window: paper", "garden: silver", "market: candle", "forest: music"),
    ("castle: honour", "vessel: quarrel", "island: summer", "bridge: letter", "tower: winter"),
    ("apple: number", "string: module", "object: method", "import: class", "value: error"),
)
PREFIX = "Remember each value.\n\n"
QUESTION = "value of the key:"


def context(passages, question: str = QUESTION) -> str:
    """The rendered context: an instruction, the passages one a line, the question."""
    return PREFIX + "\n".join(passages) + "\n\n" + question


def doc(passages, evidence: int, question: str = QUESTION) -> dict:
    """A document with the canonical fields (as posgen's depth tasks add them)."""
    return {
        "posgen_passages": list(passages),
        "posgen_evidence": evidence,
        "posgen_question": question,
    }


def loglikelihood(evidence: int, sets=PASSAGES) -> list[Instance]:
    """One log-likelihood request per passage set, its evidence at index ``evidence``."""
    return [
        Instance("loglikelihood", doc(p, evidence), (context(p), " " + p[evidence]), i, ("t", i, 1))
        for i, p in enumerate(sets)
    ]


def generation(evidence: int, sets=PASSAGES, new_tokens: int = 4) -> list[Instance]:
    """One greedy generate_until request per passage set."""
    kwargs = {"until": [], "max_gen_toks": new_tokens, "do_sample": False}
    return [
        Instance("generate_until", doc(p, evidence), (context(p), dict(kwargs)), i, ("t", i, 1))
        for i, p in enumerate(sets)
    ]


TOKEN_DIMS = 48  # the token's embedding lives in dims [0, 48); the marker in 62 and 63


def position_reader(at: int, positions: int = 256) -> torch.nn.Module:
    """A one-layer GPT-2 (learned absolute positions) whose every query attends to the key
    at position id ``at`` and copies its token: the next token is the token at ``at``.

    wte holds a token in dims [0, 48) (N(0, 0.01)); wpe is zero but for row ``at``, a
    marker +10/−10 in dims 63/62 (mean-free, so the layer norm keeps the token's part
    unbiased); q is the constant e_0, k = 30·h_63 (the marker: a logit near 30 at ``at``,
    under 1 elsewhere), v copies dims [0, 48), the output projection scales by 50 and the
    MLP is zero, so the last hidden state is the marked token's embedding (plus the
    query's own, 50 times smaller) and the tied head's argmax is that token."""
    cfg = AutoConfig.for_model(
        "gpt2", vocab_size=VOCAB, n_embd=64, n_layer=1, n_head=1, n_positions=positions,
        bos_token_id=1, eos_token_id=2,
    )  # fmt: skip
    torch.manual_seed(0)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    gen = torch.Generator().manual_seed(1)
    block = model.transformer.h[0]
    with torch.no_grad():
        wte, wpe = model.transformer.wte.weight, model.transformer.wpe.weight
        wte.zero_()
        wte[:, :TOKEN_DIMS] = torch.randn(VOCAB, TOKEN_DIMS, generator=gen) * 0.1
        wpe.zero_()
        wpe[at, 63], wpe[at, 62] = 10.0, -10.0
        w, b = block.attn.c_attn.weight, block.attn.c_attn.bias  # Conv1D: x @ w + b
        w.zero_()
        b.zero_()
        b[0] = 1.0  # q = e_0
        w[63, 64] = 30.0  # k_0 = 30·h_63
        for i in range(TOKEN_DIMS):
            w[i, 128 + i] = 1.0  # v = h[:48]
        block.attn.c_proj.weight.copy_(50.0 * torch.eye(64))
        block.attn.c_proj.bias.zero_()
        for linear in (block.mlp.c_fc, block.mlp.c_proj):
            linear.weight.zero_()
            linear.bias.zero_()
    return model
