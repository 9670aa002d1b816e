"""Tiny random-weight causal LMs and a tokenizer trained offline, for tests.

One builder per architecture family posgen claims (RoPE: Llama, Qwen2, Qwen3, Mistral,
Gemma2, Gemma3, Phi3, GPT-NeoX with partial rotary) plus the other position families:
learned absolute (GPT-2, OPT), ALiBi (BLOOM, MPT, Falcon with ``alibi=True``) and none
(SmolLM3 with every layer NoPE). Weights are seeded and float32; everything is built
locally.
"""

from __future__ import annotations

from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import AutoConfig, AutoModelForCausalLM, PreTrainedTokenizerFast

VOCAB = 384
ROPE_ARCHS = ("llama", "qwen2", "qwen3", "mistral", "gemma2", "gemma3_text", "phi3", "gpt_neox")
ALL_ARCHS = (*ROPE_ARCHS, "gpt2")
# the other position families (posgen.harness.model_side.family): learned absolute, ALiBi,
# and "smollm3_nope" (SmolLM3 with every layer NoPE: no position encoding at all); beside
# them "bloom_qk" and "mpt_qk", a BLOOM and an MPT whose q·k matters beside the bias (CONFIGS)
FAMILY_ARCHS = ("gpt2", "opt", "bloom", "mpt", "falcon_alibi", "smollm3_nope")

_COMMON = dict(
    vocab_size=VOCAB,
    hidden_size=64,
    intermediate_size=128,
    num_hidden_layers=2,
    num_attention_heads=4,
    num_key_value_heads=2,
    max_position_embeddings=2048,
    tie_word_embeddings=False,
    bos_token_id=1,
    eos_token_id=2,
    pad_token_id=0,
)

_BLOOM = dict(vocab_size=VOCAB, hidden_size=64, n_layer=2, n_head=4, bos_token_id=1, eos_token_id=2)
_MPT = dict(
    vocab_size=VOCAB, d_model=64, n_heads=4, n_layers=2, expansion_ratio=2, max_seq_len=2048
)

CONFIGS: dict[str, dict] = {
    "llama": dict(_COMMON, rope_theta=10000.0),
    "qwen2": dict(_COMMON),
    "qwen3": dict(_COMMON, head_dim=16),
    "mistral": dict(_COMMON, sliding_window=None),
    "gemma2": dict(
        _COMMON,
        head_dim=16,
        sliding_window=8,
        query_pre_attn_scalar=16,
        layer_types=["sliding_attention", "full_attention"],
    ),
    "gemma3_text": dict(
        _COMMON,
        head_dim=16,
        sliding_window=8,
        query_pre_attn_scalar=16,
        layer_types=["sliding_attention", "full_attention"],
    ),
    "phi3": dict(_COMMON, num_key_value_heads=4),
    "gpt_neox": dict(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        rotary_pct=0.25,
        max_position_embeddings=2048,
        bos_token_id=1,
        eos_token_id=2,
        tie_word_embeddings=False,
    ),
    "gpt2": dict(
        vocab_size=VOCAB,
        n_embd=64,
        n_layer=2,
        n_head=4,
        n_positions=2048,
        bos_token_id=1,
        eos_token_id=2,
    ),
    "opt": dict(
        vocab_size=VOCAB,
        hidden_size=64,
        word_embed_proj_dim=64,
        ffn_dim=128,
        num_hidden_layers=2,
        num_attention_heads=4,
        max_position_embeddings=2048,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=0,
    ),
    "bloom": dict(_BLOOM),
    # BLOOM with weights drawn 5 times wider: at BLOOM's default (0.02) q·k is so small
    # beside the bias that the logits are the bias alone to 1e-4 nats of the output; here
    # q·k moves the output by tenths of a nat (logits= on BLOOM is tested on it)
    "bloom_qk": dict(_BLOOM, initializer_range=0.1),
    "mpt": dict(_MPT),
    # MPT with weights drawn 5 times wider, as "bloom_qk": q·k moves its logits by tenths
    # beside the bias (logits= on MPT is tested on it)
    "mpt_qk": dict(_MPT, initializer_range=0.1),
    # Falcon's ALiBi path (Falcon-RW's): multi-query attention, attention and MLP in
    # parallel, the bias folded into the causal mask
    "falcon_alibi": dict(
        vocab_size=VOCAB,
        hidden_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        alibi=True,
        bos_token_id=1,
        eos_token_id=2,
    ),
    "smollm3_nope": dict(_COMMON, no_rope_layers=[0, 0]),
}
# CONFIGS key -> config.model_type where they differ
MODEL_TYPES = {
    "smollm3_nope": "smollm3",
    "bloom_qk": "bloom",
    "mpt_qk": "mpt",
    "falcon_alibi": "falcon",
}


def training_text() -> list[str]:
    """English text that ships with Python: the pydoc topic pages."""
    from pydoc_data.topics import topics

    return [topics[k] for k in sorted(topics)]


def build_tokenizer() -> PreTrainedTokenizerFast:
    """A byte-level BPE tokenizer (VOCAB entries) trained on the pydoc topics."""
    tok = Tokenizer(models.BPE(unk_token=None))
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=["<pad>", "<s>", "</s>"],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(training_text(), trainer=trainer)
    return PreTrainedTokenizerFast(
        tokenizer_object=tok, bos_token="<s>", eos_token="</s>", pad_token="<pad>"
    )


def build_model(
    arch: str = "llama", seed: int = 0, attention: str | None = None
) -> torch.nn.Module:
    """A 2-layer random-weight model of ``arch`` in float32, in eval mode (``attention``:
    its attention implementation, None for transformers' default)."""
    cfg = AutoConfig.for_model(MODEL_TYPES.get(arch, arch), **CONFIGS[arch])
    torch.manual_seed(seed)
    chosen = {} if attention is None else {"attn_implementation": attention}
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32, **chosen)
    return model.eval()


def save_tiny(path: Path, arch: str = "llama", seed: int = 0) -> Path:
    """Save model and tokenizer to ``path`` (a folder ``pretrained=`` can point at)."""
    path = Path(path)
    build_model(arch, seed).save_pretrained(path)
    build_tokenizer().save_pretrained(path)
    return path


CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>\n{{ m['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>\n{% endif %}"
)


# the config field of a trained context where it is not max_position_embeddings
CONTEXT_FIELDS = {"gpt2": "n_positions", "mpt": "max_seq_len", "mpt_qk": "max_seq_len"}
SHORT_TABLE = 128  # positions of the conftest's short_table_dir models


def build_short_context_model(
    arch: str = "llama", max_positions: int = 64, seed: int = 0
) -> torch.nn.Module:
    """``build_model`` with a small trained context (``max_position_embeddings``; GPT-2's
    ``n_positions``, MPT's ``max_seq_len``), for tests that run past it or up to it."""
    overrides = {CONTEXT_FIELDS.get(arch, "max_position_embeddings"): max_positions}
    cfg = AutoConfig.for_model(MODEL_TYPES.get(arch, arch), **dict(CONFIGS[arch], **overrides))
    torch.manual_seed(seed)
    return AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()


def save_short_context(path: Path, arch: str, max_positions: int, seed: int = 0) -> Path:
    """:func:`build_short_context_model` and the tokenizer, saved to ``path``."""
    path = Path(path)
    build_short_context_model(arch, max_positions, seed).save_pretrained(path)
    build_tokenizer().save_pretrained(path)
    return path


def save_tiny_adapter(model_dir: Path, out: Path, seed: int = 0) -> Path:
    """A LoRA adapter (rank 4 on q_proj and v_proj) for the model saved in ``model_dir``,
    with seeded non-zero weights in both factors, so that it changes the model's outputs
    (PEFT's default initialisation makes a fresh adapter the identity)."""
    from peft import LoraConfig, get_peft_model

    base = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    torch.manual_seed(seed)
    config = LoraConfig(
        r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=False
    )
    get_peft_model(base, config).save_pretrained(out)
    return Path(out)


def build_previous_token_model(seed: int = 0, strength: float = 10.0) -> torch.nn.Module:
    """A tiny Llama whose every attention head looks at the token one position back.

    Query and key weights are zero and their biases constant, so a score depends on
    positions only: with key bias b (every entry ``strength``) and query bias b rotated
    to position −1 by the model's own RoPE, the score of query position m and key
    position j is ``Σ_pairs |b_pair|² cos((m − j − 1)·θ_pair) / √d``, largest at
    j = m − 1 (weight ≈ 1 at this strength). Everything else is random, so the next token
    depends on the token at position m − 1: move positions and the generation changes.
    """
    from transformers.models.llama.modeling_llama import apply_rotary_pos_emb

    cfg = AutoConfig.for_model("llama", **dict(CONFIGS["llama"], attention_bias=True))
    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_config(cfg, dtype=torch.float32).eval()
    head_dim = cfg.hidden_size // cfg.num_attention_heads
    key_bias = torch.full((1, 1, 1, head_dim), float(strength))
    cos, sin = model.model.rotary_emb(torch.zeros(1, 1, cfg.hidden_size), torch.tensor([[-1]]))
    query_bias, _ = apply_rotary_pos_emb(key_bias, key_bias, cos, sin)
    with torch.no_grad():
        for layer in model.model.layers:
            attention = layer.self_attn
            attention.q_proj.weight.zero_()
            attention.k_proj.weight.zero_()
            attention.q_proj.bias.copy_(query_bias.flatten().repeat(cfg.num_attention_heads))
            attention.k_proj.bias.copy_(key_bias.flatten().repeat(cfg.num_key_value_heads))
    return model


def save_previous_token_model(path: Path, seed: int = 0) -> Path:
    """:func:`build_previous_token_model` and the tokenizer, saved to ``path``."""
    path = Path(path)
    build_previous_token_model(seed).save_pretrained(path)
    build_tokenizer().save_pretrained(path)
    return path
