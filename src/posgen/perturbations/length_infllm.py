"""The ``infllm`` length scheme: InfLLM's block memory (Xiao et al., 2024), as its public
code (thunlp/InfLLM, ``inf_llm/attention/context_manager.py``) defines it.

Query i (token index) attends, in one softmax:

- the local window ``0 ≤ i − j < n_local`` at the true rotary distance;
- the memory, every key at one fixed distance ``n_local − 1`` (key un-rotated, query
  rotated to ``n_local − 1``, InfLLM's ``apply_rotary_pos_emb_one_angle(q, n_local)``),
  restricted to ``i − j ≥ n_local``: the first ``n_init`` tokens (always), the tokens
  past the window not yet in a full block (always), and the ``topk`` blocks retrieved
  for i's query chunk.

The past after the initial tokens is cut into blocks of ``block_size`` tokens; a block
is formed after each query chunk of ``exc_block_size`` tokens once it lies ``n_local``
tokens behind the chunk's end, so a chunk retrieves only blocks formed before it. A
block is represented, per query head, by the mean un-rotated key of its ``repr_topk``
tokens with the most local attention (probabilities summed over every query that had
them in its window); a chunk scores block b by ``Σ_h ⟨q̄_h, r_bh⟩`` (q̄: the chunk's mean
memory query) and retrieves the ``topk`` best (all when there are at most ``topk``).

Parameters keep InfLLM's names. A parameter left out takes InfLLM's published default
(``config/mistral-inf-llm.yaml``, ``llama-3-inf-llm.yaml``: block_size 128, n_init 128,
n_local 4096, topk 16, repr_topk 4, exc_block_size 512) scaled to the trained context C
(:meth:`LengthInfLLM.for_context`): ``n_local = min(4096, C // 2)`` and, with
``s = n_local / 4096``, ``block_size = n_init = max(1, round(128 s))``,
``exc_block_size = max(1, round(512 s))``, ``repr_topk = min(4, block_size)``; topk
stays 16. At C = 8192 (Llama-3, the embedded model) that is InfLLM's own config.
The attention itself: :mod:`posgen.harness.model_side.attention.infllm`.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import ClassVar

from posgen.perturbations.base import PerturbationError, registry
from posgen.perturbations.length_base import LengthPerturbation

PUBLISHED = {  # InfLLM's configs (mistral / llama-3)
    "n_init": 128,
    "n_local": 4096,
    "block_size": 128,
    "topk": 16,
    "repr_topk": 4,
    "exc_block_size": 512,
}
FIELDS = tuple(PUBLISHED)
USAGE = "infllm or infllm:KEY=VALUE,... (keys: " + ", ".join(FIELDS) + ")"


@registry.register
@dataclass(frozen=True)
class LengthInfLLM(LengthPerturbation):
    """InfLLM's block memory (see the module doc). A field left None takes InfLLM's
    published default scaled to C when the scheme meets the model (:meth:`for_context`)."""

    name: ClassVar[str] = "infllm"
    n_init: int | None = None
    n_local: int | None = None
    block_size: int | None = None
    topk: int | None = None
    repr_topk: int | None = None
    exc_block_size: int | None = None

    def validate(self) -> None:
        for field in FIELDS:
            value = getattr(self, field)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise PerturbationError(
                    f"infllm: {field} must be a positive integer, got {value!r}"
                )
        if None not in (self.repr_topk, self.block_size) and self.repr_topk > self.block_size:
            raise PerturbationError(
                f"infllm: repr_topk ({self.repr_topk}) must be <= block_size ({self.block_size})"
            )
        if None not in (self.exc_block_size, self.n_local) and self.exc_block_size > self.n_local:
            raise PerturbationError(
                f"infllm: exc_block_size ({self.exc_block_size}) must be <= n_local "
                f"({self.n_local}), as InfLLM asserts"
            )

    @property
    def uses_attention(self) -> bool:
        return True

    @property
    def resolved(self) -> bool:
        """Whether every parameter has a value (the scheme can run)."""
        return all(getattr(self, f) is not None for f in FIELDS)

    def for_context(self, context: int) -> LengthInfLLM:
        """The scheme with every missing parameter set from C = ``context`` (module doc),
        checked against C: the local window must be shorter than the trained context."""
        if context < 2:
            raise PerturbationError(f"infllm: the trained context must be >= 2, got {context}")
        n_local = self.n_local or min(PUBLISHED["n_local"], context // 2)
        scale = n_local / PUBLISHED["n_local"]
        block = self.block_size or max(1, round(PUBLISHED["block_size"] * scale))
        defaults = {
            "n_init": max(1, round(PUBLISHED["n_init"] * scale)),
            "n_local": n_local,
            "block_size": block,
            "topk": PUBLISHED["topk"],
            "repr_topk": min(PUBLISHED["repr_topk"], block),
            "exc_block_size": min(n_local, max(1, round(PUBLISHED["exc_block_size"] * scale))),
        }
        values = {f: getattr(self, f) or defaults[f] for f in FIELDS}
        if values["n_local"] >= context:
            raise PerturbationError(
                f"infllm: n_local ({values['n_local']}) must be < the trained context C = "
                f"{context}: the local window is attended at true distances"
            )
        return dataclasses.replace(self, **values)

    def to_string(self) -> str:
        given = [f"{f}={getattr(self, f)}" for f in FIELDS if getattr(self, f) is not None]
        return "infllm" + (":" + ",".join(given) if given else "")

    @classmethod
    def usage(cls) -> str:
        return USAGE


def parse_infllm(spec: str, value: str) -> LengthInfLLM:
    """``infllm`` or ``infllm:KEY=VALUE,...`` (``:`` also separates, for lm-eval's
    ``--model_args``, which splits at every comma): keys are InfLLM's parameter names."""
    params: dict[str, int] = {}
    for item in (t.strip() for t in value.replace(":", ",").split(",")):
        if not item:
            continue
        key, eq, text = (t.strip() for t in item.partition("="))
        if not eq or key not in FIELDS:
            raise PerturbationError(f"length scheme {spec!r}: {item!r} is not KEY=VALUE; {USAGE}")
        if key in params:
            raise PerturbationError(f"length scheme {spec!r}: {key} is given twice")
        try:
            params[key] = int(text)
        except ValueError:
            raise PerturbationError(
                f"length scheme {spec!r}: {key}={text!r} is not an integer"
            ) from None
    return LengthInfLLM(**params)
