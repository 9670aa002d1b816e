"""The transformers internals of the non-rotary position families
(:mod:`posgen.harness.position_family`), checked by :func:`posgen.compat.check`.

posgen moves learned absolute positions by replacing, within a block, the ``forward`` of
the model's position embedding (:func:`posgen.compat.forward_replaced`), and ALiBi
positions by a forward pre-hook on each decoder block that swaps what it is handed
(:mod:`posgen.harness.model_side.alibi.rows`): BLOOM's ``alibi=``; MPT's ``position_bias=``,
wrapped so that its attention's ``scores + position_bias`` adds each row's bias (a call
that never adds it is refused at run time); Falcon's ``alibi=`` and the mask it folds it
into (checked at every call to be ``masked_fill(alibi / √(D/H), ...)`` of the handed
bias); it reads BLOOM's and Falcon's slopes from the model file's own
``build_alibi_tensor``, MPT's from the bias the model hands its blocks. The ALiBi
decomposition and ``logits=`` wrap the bias each attention module is handed, whose
``baddbmm`` (BLOOM) or addition to the scores (MPT) is that module's logits (a call that
computes none through it is refused at run time:
:func:`posgen.harness.model_side.alibi.bias.alibi_bias_calls`); on Falcon they wrap the
mask each attention module is handed, whose sdpa call (``attn_mask=``) forms its logits
(:mod:`posgen.harness.model_side.alibi.falcon_sdpa`). Each entry
below is a callable and the parameters posgen's hooks are written for (the first ones of
its signature, or a keyword that must be among them).
"""

from __future__ import annotations

import inspect

from posgen.compat import _resolve

# "module:attr" -> (parameters it must start with, keyword it must take or "")
POSITION_FAMILY_INTERNALS: dict[str, tuple[tuple[str, ...], str]] = {
    # GPT-2's wpe: a plain nn.Embedding handed the position ids first
    "torch.nn:Embedding.forward": (("self", "input"), ""),
    # OPT's table: handed position_ids by keyword, adds its offset of 2 itself
    "transformers.models.opt.modeling_opt:OPTLearnedPositionalEmbedding.forward": (
        ("self", "attention_mask", "cache_length", "position_ids"),
        "",
    ),
    # BLOOM: the slopes come from its own function; each block takes the bias as alibi=
    "transformers.models.bloom.modeling_bloom:build_alibi_tensor": (
        ("attention_mask", "num_heads", "dtype"),
        "",
    ),
    "transformers.models.bloom.modeling_bloom:BloomBlock.forward": (("self",), "alibi"),
    # BLOOM's attention: handed the bias as alibi= (a pre-hook wraps it: its baddbmm is
    # the attention's logits, recorded by the decomposition, replaced by logits=) and its
    # mask as attention_mask= (logits= reads each row's attended entries from it)
    "transformers.models.bloom.modeling_bloom:BloomAttention.forward": (
        ("self", "hidden_states", "residual", "alibi", "attention_mask"),
        "",
    ),
    # MPT: every block is handed the batch's one bias as position_bias= and its boolean
    # mask as attention_mask=; its attention adds the (wrapped) bias to its scores (the
    # addition is its logits: recorded by the decomposition, replaced by logits=, which
    # reads the mask as MPT means it, True where masked, checked at every call)
    "transformers.models.mpt.modeling_mpt:MptBlock.forward": (
        ("self", "hidden_states", "position_bias", "attention_mask"),
        "",
    ),
    "transformers.models.mpt.modeling_mpt:MptAttention.forward": (
        ("self", "hidden_states", "position_bias"),
        "attention_mask",
    ),
    # Falcon (alibi=True): the slopes from its own function; each decoder layer takes the
    # mask that folds the bias as attention_mask= (and, up to transformers 5.24, the bias
    # itself as alibi=, which posgen replaces too where it is given)
    "transformers.models.falcon.modeling_falcon:build_alibi_tensor": (
        ("attention_mask", "num_heads", "dtype"),
        "",
    ),
    "transformers.models.falcon.modeling_falcon:FalconDecoderLayer.forward": (
        ("self", "hidden_states"),
        "attention_mask",
    ),
    "transformers.models.falcon.modeling_falcon:FalconAttention.forward": (
        ("self", "hidden_states"),
        "attention_mask",
    ),
    # Falcon's logits (decomposition, logits=): with alibi its sdpa attention hands that
    # mask (wrapped) to torch's scaled_dot_product_attention as attn_mask, whose
    # q·kᵀ·scale + attn_mask are its logits: 5.24's FalconAttention.forward calls it
    # itself, 5.25's through this function, handed the mask and Falcon's 1/√d scaling (a
    # layer call that hands its mask to no sdpa is refused at run time:
    # posgen.harness.model_side.alibi.falcon_sdpa)
    "transformers.integrations.sdpa_attention:sdpa_attention_forward": (
        ("module", "query", "key", "value", "attention_mask"),
        "scaling",
    ),
}


def position_family_problems() -> list[str]:
    """Every entry of :data:`POSITION_FAMILY_INTERNALS` that is missing or whose
    parameters changed ([] when all are as posgen expects)."""

    problems = []
    for path, (first, keyword) in POSITION_FAMILY_INTERNALS.items():
        try:
            params = tuple(inspect.signature(_resolve(path)).parameters)
        except (ImportError, AttributeError) as exc:
            problems.append(f"{path}: {exc}")
            continue
        if params[: len(first)] != first or (keyword and keyword not in params):
            want = f"{first}" + (f" and {keyword}=" if keyword else "")
            problems.append(f"{path}: parameters {params}, posgen's hooks need {want}")
    return problems
