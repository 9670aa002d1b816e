"""InfLLM's block memory (:mod:`posgen.perturbations.length_infllm`) as a transformers
attention function, on the model's own post-RoPE q, k, v.

For query i in chunk ``[s, e)`` (chunks of ``E = exc_block_size`` from token 0), with
``L = n_local`` and the memory set ``M(s)`` (the first ``n_init`` tokens, the blocks
retrieved for the chunk, the tokens past ``n_init`` not yet in a formed block)::

    local  (0 ≤ i − j < L):           s_ij = ⟨R(p_i) q_i, R(p_j) k_j⟩ · scaling
    memory (j ∈ M(s), i − j ≥ L):     s_ij = ⟨R(L − 1) q_i, R(0) k_j⟩ · scaling
    a_i = softmax over both sets (one softmax),  out_i = Σ_j a_ij v_j

``R(p)`` is the model's own rotary map (:mod:`.lambda_attention` explains how post-RoPE
queries are turned to the fixed angle and keys un-rotated with the family's own
``apply_rotary_pos_emb``). Blocks: ``[n_init + b·B, n_init + (b+1)·B)``; before the
chunk at s, the blocks formed are ``nb(s) = max(0, ⌊(s − L − n_init) / B⌋)`` (InfLLM forms
them after each chunk, once ``L`` tokens behind its end). Block b's representative per
query head h: ``r_bh = mean_{j ∈ top_repr(b, h)} R(0) k_j`` over the ``repr_topk`` tokens
with the largest local score ``Σ_i a_ij`` (local part of the joint softmax, every query
with j in its window; GQA keys expanded to query heads first). The chunk retrieves the
``topk`` blocks with the largest ``Σ_h ⟨q̄_h, r_bh⟩``, ``q̄_h`` the mean fixed-angle query
of the chunk's real tokens (all blocks when ``nb ≤ topk``).

Each row runs on its real tokens only (``lengths``: right padding, as hf-posgen's
batches come), so a row's result does not depend on the batch; padded slots get zeros.
Memory per chunk: scores ``[H, E, E + L + n_init + topk·B + B]`` float32; nothing is
n × n. Test-only switches (:func:`infllm_attention`): ``true_positions`` scores memory
keys at their true rotary distance; ``memory=False`` keeps only the initial tokens in
memory (no blocks, no remainder).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Any

import torch

from posgen.harness.model_family import family_of, require_rotary, rotary_modules
from posgen.harness.model_side.attention.lambda_attention import _check_supported, causal_attention
from posgen.harness.model_side.attention.rerotation import rotary_recorder
from posgen.harness.model_side.attention.wrapper import OwnAttention, WrappedAttention
from posgen.perturbations.length_infllm import LengthInfLLM

NAME_PREFIX = "posgen_infllm_"


@dataclass
class _State:
    """The scheme, the rows' real lengths, the test switches, and the rotary module's
    latest inputs/outputs (from a forward hook)."""

    scheme: LengthInfLLM
    lengths: tuple[int, ...] | None = None
    true_positions: bool = False
    memory: bool = True
    rotary: torch.nn.Module | None = None
    cos: torch.Tensor | None = None  # [B|1, T, d]
    sin: torch.Tensor | None = None
    positions: torch.Tensor | None = None
    x: torch.Tensor | None = None
    fixed: tuple[torch.Tensor, torch.Tensor] | None = field(default=None)  # at [L − 1, 0]


def active_scheme() -> LengthInfLLM | None:
    """The scheme of the enclosing :func:`infllm_attention` block, or None outside one."""
    state = INFLLM_ATTENTION.current()
    return None if state is None else state.scheme


def _layer_call(
    state: _State, own: OwnAttention, module, query, key, value, attention_mask, **kwargs
):
    """One layer's attention call: the model's own where every query sees all its keys
    (all in the local window), else InfLLM's output; a forward after a KV cache is refused."""
    if query.shape[2] != key.shape[2]:
        raise RuntimeError("infllm attention needs one full forward (no KV cache)")
    if query.shape[2] <= state.scheme.n_local:  # all in the window: plain causal
        return own(module, query, key, value, attention_mask, **kwargs)
    _check_supported(module, attention_mask, kwargs)
    return infllm_output(module, query, key, value, **kwargs), None


# the sdpa mask function: None for unpadded causal input
INFLLM_ATTENTION = WrappedAttention(
    NAME_PREFIX, "infllm attention", "posgen's infllm_attention context", _layer_call, "sdpa"
)


def infllm_output(module, query, key, value, **kwargs: Any) -> torch.Tensor:
    """InfLLM's attention output ``[B, T, H, d]`` (as an attention function returns it)
    of the enclosing :func:`infllm_attention` block for post-RoPE ``query [B, H, T, d]``,
    ``key``/``value [B, Hkv, T, d]``; rows past their real length get zeros."""
    state = INFLLM_ATTENTION.current()
    if state is None:
        raise RuntimeError("infllm_output was called outside infllm_attention")
    _check_supported(module, None, kwargs)
    if state.cos is None or state.cos.shape[-1] != query.shape[-1]:
        raise RuntimeError("infllm attention needs full-width rotary on every token")
    scaling = float(kwargs.get("scaling") or module.scaling)
    q_mem, k_mem = memory_views(module, query, key, state)
    groups = query.shape[1] // key.shape[1]
    out = torch.zeros_like(query)
    for b in range(query.shape[0]):
        n = query.shape[2] if state.lengths is None else int(state.lengths[b])
        rows = (query[b, :, :n], key[b, :, :n], value[b, :, :n], q_mem[b, :, :n], k_mem[b, :, :n])
        q, k, v, qm, km = (t if t.shape[0] == query.shape[1] else _expand(t, groups) for t in rows)
        if n <= state.scheme.n_local:
            out[b, :, :n] = causal_attention(q[None], k[None], v[None], scaling)[0]
        else:
            out[b, :, :n] = infllm_row(q, k, v, qm, km, state, scaling).to(query.dtype)
    return out.transpose(1, 2).contiguous()


def _expand(t: torch.Tensor, groups: int) -> torch.Tensor:
    """``[Hkv, n, d] -> [H, n, d]``, query head h using key head h // groups."""
    return t.repeat_interleave(groups, dim=0)


def memory_views(module, query, key, state: _State) -> tuple[torch.Tensor, torch.Tensor]:
    """The memory branch's queries ``R(L − 1) q_i`` ``[B, H, T, d]`` and keys ``R(0) k_j``
    ``[B, Hkv, T, d]`` from post-RoPE ``query = a·Rot(p_i) q_i``, ``key = a·Rot(p_j) k_j``
    (a: the attention scaling, ``a² = cos² + sin²``): ``R(L − 1) q_i = Rot(L − 1 − p_i)
    query_i`` and ``k_j = Rot(−p_j) key_j / a²``, each through the family's own
    ``apply_rotary_pos_emb``. With ``true_positions``: ``query`` and ``key`` themselves."""
    if state.true_positions:
        return query, key
    apply = family_of(module).apply_rotary_function(module)
    cos, sin = state.cos, state.sin
    norm = cos * cos + sin * sin  # [B|1, T, d]
    fixed_cos, fixed_sin = _fixed_maps(state)
    c_l, s_l = fixed_cos[:, :1], fixed_sin[:, :1]
    to_l = ((c_l * cos + s_l * sin) / norm, (s_l * cos - c_l * sin) / norm)
    q_mem = apply(query, query[:, :1, :1], *to_l)[0]
    k_plain = apply(key, key[:, :1, :1], cos, -sin)[0] / norm.unsqueeze(1)
    k_mem = apply(k_plain, k_plain[:, :1, :1], fixed_cos[:, 1:], fixed_sin[:, 1:])[0]
    return q_mem, k_mem


def _fixed_maps(state: _State) -> tuple[torch.Tensor, torch.Tensor]:
    """(cos, sin) of the model's rotary module at positions ``L − 1`` and 0, ``[1, 2, d]``
    (the forward's max position rides along, so dynamic scalings keep its frequencies)."""
    if state.fixed is None:
        assert state.rotary is not None and state.positions is not None and state.x is not None
        pos = state.positions
        fixed = torch.tensor([[state.scheme.n_local - 1, 0]], dtype=pos.dtype, device=pos.device)
        ids = torch.cat([fixed, pos.max().reshape(1, 1)], dim=1)
        cos, sin = state.rotary.forward(state.x[:1, :3], ids)  # bypass posgen's hooks
        state.fixed = (cos[:, :2], sin[:, :2])
    return state.fixed


def blocks_before(start: int, scheme: LengthInfLLM) -> int:
    """``nb(s) = max(0, ⌊(s − n_local − n_init) / block_size⌋)``: the blocks formed
    before the query chunk starting at token ``start``."""
    return max(0, (start - scheme.n_local - scheme.n_init) // scheme.block_size)


def retrieve_blocks(q_mean: torch.Tensor, reprs: torch.Tensor, topk: int) -> torch.Tensor:
    """The retrieved blocks, ascending: the ``topk`` indices b with the largest
    ``Σ_h ⟨q̄_h, r_bh⟩`` for ``q_mean [H, d]`` and ``reprs [H, nb, d]`` (every block when
    ``nb ≤ topk``), long ``[min(topk, nb)]``."""
    n_blocks = reprs.shape[1]
    if n_blocks <= topk:
        return torch.arange(n_blocks)
    scores = torch.einsum("hd,hbd->b", q_mean.float(), reprs.float())
    return scores.topk(topk).indices.sort().values


def block_representatives(
    k_mem: torch.Tensor, score: torch.Tensor, first: int, count: int, scheme: LengthInfLLM
) -> torch.Tensor:
    """Representatives ``[H, count, d]`` of blocks ``first .. first + count − 1``: per head,
    the mean of ``k_mem [H, n, d]`` over each block's ``repr_topk`` tokens with the
    largest local score ``score [H, n]`` (InfLLM's ``get_block_k``)."""
    size = scheme.block_size
    lo = scheme.n_init + first * size
    hi = lo + count * size
    heads, _, dim = k_mem.shape
    keys = k_mem[:, lo:hi].reshape(heads, count, size, dim)
    top = score[:, lo:hi].reshape(heads, count, size).topk(scheme.repr_topk, dim=-1).indices
    picked = torch.gather(keys, 2, top.unsqueeze(-1).expand(-1, -1, -1, dim))
    return picked.float().mean(dim=2)


def infllm_row(q, k, v, q_mem, k_mem, state: _State, scaling: float) -> torch.Tensor:
    """One row's InfLLM attention ``[H, n, d]`` (module doc) from ``q, k, v, q_mem, k_mem``
    ``[H, n, d]`` (keys already expanded to query heads), chunk by chunk."""
    scheme = state.scheme
    heads, n, dim = q.shape
    score = torch.zeros(heads, n, dtype=torch.float32, device=q.device)  # Σ_i a_ij (local)
    reprs = q.new_zeros((heads, 0, dim), dtype=torch.float32)
    out = torch.empty(heads, n, v.shape[-1], dtype=torch.float32, device=q.device)
    for start in range(0, n, scheme.exc_block_size):
        stop = min(n, start + scheme.exc_block_size)
        formed = blocks_before(start, scheme) if state.memory else 0
        if formed > reprs.shape[1]:
            new = block_representatives(
                k_mem, score, reprs.shape[1], formed - reprs.shape[1], scheme
            )
            reprs = torch.cat([reprs, new], dim=1)
        picked = retrieve_blocks(q_mem[:, start:stop].float().mean(dim=1), reprs, scheme.topk)
        memory = memory_keys(start, stop, formed, picked, state)
        out[:, start:stop] = _chunk(
            q, k, v, q_mem, k_mem, memory, score, start, stop, state, scaling
        )
    return out


def memory_keys(
    start: int, stop: int, formed: int, picked: torch.Tensor, state: _State
) -> torch.Tensor:
    """Token indices of the chunk ``[start, stop)``'s memory: the initial tokens, the
    retrieved blocks' tokens and (with memory on) the tokens after the formed blocks up to
    ``stop − 1 − L`` (the last any query of the chunk sees beyond its window), long."""
    scheme = state.scheme
    last = stop - scheme.n_local  # exclusive bound of j with i − j ≥ L for some i < stop
    init = torch.arange(min(scheme.n_init, max(0, last)))
    size = scheme.block_size
    offsets = torch.arange(size)
    blocks = (scheme.n_init + picked.unsqueeze(1) * size + offsets).reshape(-1)
    rest_lo = scheme.n_init + formed * size
    rest = torch.arange(rest_lo, max(rest_lo, last)) if state.memory else torch.arange(0)
    return torch.cat([init, blocks, rest])


def _chunk(q, k, v, q_mem, k_mem, memory, score, start, stop, state: _State, scaling):
    """The chunk's output ``[H, stop − start, d]`` (float32): local band and memory logits
    in one softmax, ``a = exp(s − m) / Σ exp(s − m)`` with ``m`` the row max over both
    sets, computed in place on the two score tensors (no concatenation); adds the local
    probabilities' column sums into ``score``."""
    window = state.scheme.n_local
    lo = max(0, start - window + 1)
    i = torch.arange(start, stop, device=q.device).unsqueeze(1)
    j = torch.arange(lo, stop, device=q.device).unsqueeze(0)
    band = (j <= i) & (i - j < window)  # [Lq, Lk]
    local = (q[:, start:stop] @ k[:, lo:stop].transpose(-1, -2)).float().mul_(scaling)
    local.masked_fill_(~band, float("-inf"))
    memory = memory.to(q.device)
    far = (i - memory.unsqueeze(0)) >= window  # [Lq, M]
    remote = (q_mem[:, start:stop] @ k_mem[:, memory].transpose(-1, -2)).float().mul_(scaling)
    remote.masked_fill_(~far, float("-inf"))
    top = local.amax(dim=-1, keepdim=True)  # finite: the diagonal is always local
    if remote.shape[-1]:
        top = torch.maximum(top, remote.amax(dim=-1, keepdim=True))
    local.sub_(top).exp_()
    remote.sub_(top).exp_()
    total = local.sum(dim=-1, keepdim=True) + remote.sum(dim=-1, keepdim=True)
    local.div_(total)
    remote.div_(total)
    score[:, lo:stop] += local.sum(dim=1)
    out = local.to(v.dtype) @ v[:, lo:stop] + remote.to(v.dtype) @ v[:, memory]
    return out.float()


@contextmanager
def infllm_attention(
    model: torch.nn.Module,
    scheme: LengthInfLLM,
    lengths: tuple[int, ...] | None = None,
    *,
    true_positions: bool = False,
    memory: bool = True,
) -> Iterator[None]:
    """Within the block, ``model`` runs InfLLM's attention under ``scheme`` (resolved:
    every parameter set, :meth:`LengthInfLLM.for_context`); ``lengths``: each row's real
    length (right padding; None: every row is real). ``true_positions`` and ``memory``
    are the exactness tests' switches (module doc). Restored on exit."""
    if not scheme.resolved:
        raise ValueError(f"{scheme.to_string()}: set its parameters first (for_context(C))")
    require_rotary(model, f"length={scheme.to_string()}")
    modules = rotary_modules(model)
    if len(modules) != 1:
        raise RuntimeError(f"infllm attention needs one rotary module, found {len(modules)}")
    state = _State(scheme, lengths, true_positions, memory)
    with INFLLM_ATTENTION.active(model, state, [(modules[0], rotary_recorder(state))]):
        yield
