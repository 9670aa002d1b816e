"""Per-row ALiBi biases, handed to each model's own attention: what one ALiBi decoder block
is handed (its bias, and where the model folds the bias into it, its mask) is replaced by
the bias of the planned key positions π ``[rows, K]``, ``−m_h·(i − π_b(j))`` up to the
per-query constant softmax ignores, in the form and precision the model builds its own
(transformers 5.x; :mod:`posgen.compat.position_families` lists what is relied on):

- **BLOOM** hands each block ``alibi`` ``[B·H, 1, K]`` = ``m_h·j`` (float32 products, from
  the mask's cumulative sum): replaced by ``m_h·π_b(j)``.
- **MPT** hands every block one bias for the whole batch, ``position_bias`` ``[H, 1, L]`` =
  ``m_h·(j − L + 1)`` over its ``max_seq_len`` L, and refuses any bias that is not 3-D;
  its attention slices the last K columns and adds them to ``q·kᵀ·scale``
  ``[B, H, Q, K]``. posgen hands it the same bias wrapped (:class:`RowBias`: same values,
  same shape, sliced as the model slices it) whose addition to the scores adds instead
  the rows' ``m_h·(π_b(j) − (K − 1))`` ``[B, H, 1, K]`` (MPT's own form, float32, the
  model's dtype promotion): MPT's own matmul, scale, mask, softmax and values run around
  it. A call of the block whose scores never took the bias is refused.
- **Falcon** (``alibi=True``) builds BLOOM's bias with bfloat16 products and folds it into
  the causal mask it hands every block, ``masked_fill(alibi / √(D/H), causal < −1, min)``
  ``[B, H, Q, K]`` (its sdpa attention adds only that mask; its eager attention adds
  ``alibi`` too): both replaced, ``alibi`` by ``bf16(m_h·π_b(j))`` and the mask by the
  model's same expression on it. The handed mask is first checked to be exactly that
  expression of the handed bias, so a release that folds it otherwise is refused.

``heads=`` keeps the model's own bias in the heads not chosen. The source of positions
is handed each call's natural key positions ``[rows, K]`` (what the model's own bias is
built from: each key's count of real tokens before it), which generation follows.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable

import torch

from posgen.harness.position_family import PositionFamily

#: ``source(natural, width) -> positions [rows, K]``: the key positions an ALiBi block's
#: bias is built from, given the natural ones ``[rows, K]`` of a forward whose queries are
#: the last ``width`` of the K keys.
KeyPositions = Callable[[torch.Tensor, int], torch.Tensor]

#: ``replace(block, hidden, kwargs) -> (kwargs, done)``: the keywords one chosen block is
#: called with instead, and a check the block's call ran (None: nothing to check).
Replace = Callable[[torch.nn.Module, torch.Tensor, dict], tuple[dict, Callable[[], None] | None]]


def alibi_slopes(model: torch.nn.Module, family: PositionFamily) -> torch.Tensor:
    """The slopes m_h ``[H]`` (float32) of BLOOM or Falcon, from the model file's own
    ``build_alibi_tensor`` over two consecutive tokens (its bias at key 1 is m_h·1, in
    the model's precision: Falcon's bfloat16 slopes)."""
    block = family.blocks(model)[0]
    build = getattr(sys.modules[type(block).__module__], "build_alibi_tensor", None)
    if build is None:
        raise RuntimeError(f"{type(block).__module__} has no build_alibi_tensor")
    heads = int(model.config.num_attention_heads)
    return build(torch.ones(1, 2, dtype=torch.long), heads, torch.float32)[:, 0, 1]


def natural_positions(valid: torch.Tensor) -> torch.Tensor:
    """Each key's count of real keys before it, ``(cumsum − 1)·valid`` ``[rows, K]`` (the
    positions BLOOM's and Falcon's own bias is built from), from ``valid`` ``[rows, K]``."""
    valid = valid.long()
    return (valid.cumsum(-1) - 1) * valid


def _kept(own: torch.Tensor, new: torch.Tensor, keep: torch.Tensor | None) -> torch.Tensor:
    """``new`` with heads (dim 1) where ``keep`` is True taken from ``own``."""
    if keep is None:
        return new
    return torch.where(keep.to(new.device).view(1, -1, 1, 1), own, new)


def bias_replacer(
    model: torch.nn.Module,
    family: PositionFamily,
    source: KeyPositions,
    keep: torch.Tensor | None,
) -> Replace:
    """What each chosen block of ``family``'s form is handed instead (module doc)."""
    forms = {"bloom": _bloom, "mpt": _mpt, "falcon": _falcon}
    if family.bias_form not in forms:
        raise RuntimeError(f"{family.name}: no ALiBi bias form posgen can replace")
    return forms[family.bias_form](model, family, source, keep)


# ---------------------------------------------------------------- BLOOM
def _bloom(model, family, source, keep) -> Replace:
    slopes = alibi_slopes(model, family)
    heads = slopes.numel()

    def replace(block, hidden, kwargs):
        bias = kwargs.get("alibi")
        if bias is None:
            raise RuntimeError(f"{type(block).__name__} was called without alibi=")
        own = bias.view(-1, heads, 1, bias.shape[-1])
        natural = torch.round(own[:, 0, 0].float() / slopes[0].item()).long()
        pos = source(natural, int(hidden.shape[1]))
        new = _kept(own, _products(pos, slopes, torch.float32, bias.dtype), keep)
        return {**kwargs, "alibi": new.reshape(bias.shape)}, None

    return replace


def _products(
    pos: torch.Tensor, slopes: torch.Tensor, precision: torch.dtype, dtype: torch.dtype
) -> torch.Tensor:
    """``m_h·pos[r, j]`` ``[rows, H, 1, K]``: float32 products rounded to ``precision``
    (BLOOM float32, Falcon bfloat16, as their own), then in ``dtype``."""
    m = slopes.to(pos.device, torch.float32)
    new = m[None, :, None, None] * pos[:, None, None, :].to(torch.float32)
    return new.to(precision).to(dtype)


# ---------------------------------------------------------------- Falcon
def _falcon(model, family, source, keep) -> Replace:
    slopes = alibi_slopes(model, family)
    heads = slopes.numel()
    config = model.config
    scale = math.sqrt(config.hidden_size // config.num_attention_heads)  # the model's own

    def replace(block, hidden, kwargs):
        bias, mask = kwargs.get("alibi"), kwargs.get("attention_mask")
        if mask is None or mask.ndim != 4:
            raise RuntimeError(
                f"{type(block).__name__} was called without a 4-D mask; posgen moves "
                "Falcon's ALiBi where the model folds it into its mask (transformers 5.x)"
            )
        low = torch.finfo(mask.dtype).min
        masked = mask == low
        natural = natural_positions(~masked[:, 0, -1])
        if bias is None:  # transformers 5.25: the bias reaches the layers in the mask only
            own = _products(natural, slopes, torch.bfloat16, mask.dtype)
        else:  # 5.24: as alibi= too
            own = bias.view(-1, heads, 1, bias.shape[-1])
        if not torch.equal(torch.masked_fill(own / scale, masked, low), mask):
            raise RuntimeError(
                f"{type(block).__name__}'s mask is not masked_fill(alibi / √(D/H), causal, "
                "min); posgen is tested with transformers 5.24's and 5.25's Falcon"
            )
        pos = source(natural, int(hidden.shape[1]))
        new = _kept(own, _products(pos, slopes, torch.bfloat16, own.dtype), keep)
        out = {**kwargs, "attention_mask": torch.masked_fill(new / scale, masked, low)}
        if bias is not None:
            out["alibi"] = new.reshape(bias.shape)
        return out, None

    return replace


# ---------------------------------------------------------------- MPT
class RowBias(torch.Tensor):
    """MPT's own batch bias ``[H, 1, L]`` (or the slice its attention takes), whose
    addition to the scores ``[B, H, Q, K]`` is ``_posgen_add(scores, own)`` (``own`` the
    plain slice); ``_posgen_rows(scores, own)``, where set, is the bias ``[B, H, 1, K]``
    the positions' wrapper adds, which a wrapper around it (the logits' capture) adds in
    its place (None: ``own``)."""

    def __getitem__(self, key) -> torch.Tensor:
        """The model's slice, still adding per row."""
        plain = self.as_subclass(torch.Tensor)[key]
        return row_bias(plain, self._posgen_add, self._posgen_rows)

    def __radd__(self, scores: torch.Tensor) -> torch.Tensor:
        """``scores + position_bias`` in MPT's attention: the rows' bias added."""
        return self._posgen_add(scores, self.as_subclass(torch.Tensor))


#: ``rows(scores, own) -> bias [B, H, 1, K]``: the bias a :class:`RowBias` adds to
#: ``scores`` [B, H, Q, K] in place of the model's own slice ``own`` [H, 1, K]
RowsBias = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]


def row_bias(
    bias: torch.Tensor, add: Callable[..., torch.Tensor], rows: RowsBias | None = None
) -> torch.Tensor:
    """``bias`` as a :class:`RowBias` whose addition to the scores is ``add(scores, own)``
    (``rows``: the per-row bias it adds, for a wrapper around it; None: the model's own)."""
    wrapped = bias.as_subclass(RowBias)
    wrapped._posgen_add = add
    wrapped._posgen_rows = rows
    return wrapped


def rows_of(bias: torch.Tensor) -> RowsBias | None:
    """The per-row bias a :class:`RowBias` from :func:`bias_replacer` adds (None for the
    model's own bias, or a wrapper that adds it unchanged)."""
    return getattr(bias, "_posgen_rows", None) if isinstance(bias, RowBias) else None


def _mpt(model, family, source, keep) -> Replace:
    def replace(block, hidden, kwargs):
        bias, mask = kwargs.get("position_bias"), kwargs.get("attention_mask")
        if bias is None or bias.ndim != 3 or bias.shape[-1] < 2:
            raise RuntimeError(f"{type(block).__name__} was called without its [H, 1, L] bias")
        slopes = (bias[:, 0, -1] - bias[:, 0, -2]).float()  # the model's own m_h
        width = int(hidden.shape[1])
        added: list[bool] = []

        def rows_bias(scores: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
            rows, keys = scores.shape[0], scores.shape[-1]
            valid = torch.ones(rows, keys, dtype=torch.bool, device=scores.device)
            if mask is not None:  # MPT's boolean mask: True where masked
                valid = ~mask[:, 0, -1].expand(rows, keys)
            pos = source(natural_positions(valid), width).to(scores.device)
            shifted = (pos - (keys - 1)).to(torch.float32)  # MPT's j − K + 1
            new = slopes.to(scores.device)[None, :, None, None] * shifted[:, None, None, :]
            added.append(True)
            return _kept(own[None], new.to(own.dtype), keep)  # [B, H, 1, K]

        def add(scores: torch.Tensor, own: torch.Tensor) -> torch.Tensor:
            return scores + rows_bias(scores, own)

        def done() -> None:
            if not added:
                raise RuntimeError(
                    f"{type(block).__name__} never added its position_bias to its scores; "
                    "posgen is tested with transformers 5.24's MPT attention"
                )

        return {**kwargs, "position_bias": row_bias(bias, add, rows_bias)}, done

    return replace
