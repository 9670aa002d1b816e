"""Model-family conventions in one place: where a Hugging Face model keeps its rotary
embedding and its own attention code.

posgen never re-implements attention or RoPE. It finds the model's own modules and the
functions of the model's modeling file (``transformers.models.<family>.modeling_<family>``)
by name: the rotary embedding module (class name ending in ``RotaryEmbedding``), the
attention modules (``...Attention``), ``eager_attention_forward``, ``apply_rotary_pos_emb``
(which rotates with the family's own ``rotate_half``) and ``repeat_kv``. One
:class:`ModelFamily` records these names for the families posgen is tested on; a family
that names them differently registers its own entry with :func:`register_family`, and
everything that needs them (position hooks, qk noise, attention capture) follows.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from types import ModuleType
from typing import TYPE_CHECKING

from posgen.compat import rotary_function

if TYPE_CHECKING:  # annotations only: the module stays light to import
    import torch


class NoRotaryEmbeddingError(ValueError):
    """The model has no rotary position embedding for position/feature schemes to act on."""


@dataclass(frozen=True)
class ModelFamily:
    """The names under which one model family keeps its rotary and attention code."""

    name: str
    model_types: tuple[str, ...]  # config.model_type values of the family
    rotary_suffix: str = "RotaryEmbedding"
    attention_suffix: str = "Attention"
    eager_attention: str = "eager_attention_forward"
    apply_rotary: str = "apply_rotary_pos_emb"  # (q, k, cos, sin) -> rotated (q, k)
    repeat_kv: str | None = "repeat_kv"  # None: no grouped KV heads

    def rotary_modules(self, model: torch.nn.Module) -> list[torch.nn.Module]:
        """The model's rotary embedding modules (e.g. ``model.rotary_emb``)."""
        return [m for m in model.modules() if type(m).__name__.endswith(self.rotary_suffix)]

    def attention_modules(self, model: torch.nn.Module) -> list[torch.nn.Module]:
        """The model's self-attention modules, in layer order where they know their layer."""
        found = [m for m in model.modules() if type(m).__name__.endswith(self.attention_suffix)]
        if not found:
            raise ValueError(f"{type(model).__name__}: no attention module found")
        if all(hasattr(m, "layer_idx") for m in found):
            found.sort(key=lambda m: m.layer_idx)
        return found

    def eager_attention_function(self, module: torch.nn.Module) -> Callable:
        """The family's own eager attention (Gemma2's soft-capping lives there)."""
        return self._function(module, self.eager_attention, "run this architecture's attention")

    def apply_rotary_function(self, module: torch.nn.Module) -> Callable:
        """The family's own ``apply_rotary_pos_emb(q, k, cos, sin)``: the plain function,
        also where transformers 5.25 wraps it in a ``kernels`` module
        (:func:`posgen.compat.rotary_function`)."""
        found = self._function(module, self.apply_rotary, "rotate by this architecture's RoPE")
        return rotary_function(found)

    def expand_kv(self, module: torch.nn.Module, key: torch.Tensor, heads: int) -> torch.Tensor:
        """[B, KV, n, d] -> [B, H, n, d] with the family's own ``repeat_kv`` where it has one."""
        groups = heads // key.shape[1]
        repeat = getattr(_modeling_file(module), self.repeat_kv or "", None)
        if repeat is not None:
            return repeat(key, groups)
        return key.repeat_interleave(groups, dim=1)

    def _function(self, module: torch.nn.Module, name: str, purpose: str) -> Callable:
        fn = getattr(_modeling_file(module), name, None)
        if fn is None:
            raise RuntimeError(
                f"{type(module).__module__} has no {name}; posgen cannot {purpose}. "
                f"Register a ModelFamily for {self.name!r} that names it "
                "(posgen.harness.model_family.register_family)"
            )
        return fn


_FAMILIES: dict[str, ModelFamily] = {}
GENERIC = ModelFamily("generic", ())  # transformers' common names, for unlisted families


def register_family(family: ModelFamily) -> ModelFamily:
    """Add a family; refuses a model type that another family already claims."""
    for model_type in family.model_types:
        other = _FAMILIES.get(model_type)
        if other is not None and other != family:
            raise ValueError(f"model type {model_type!r} already belongs to {other.name!r}")
    _FAMILIES.update(dict.fromkeys(family.model_types, family))
    return family


for _family in (
    ModelFamily("llama", ("llama",)),
    ModelFamily("qwen2", ("qwen2",)),
    ModelFamily("qwen3", ("qwen3",)),
    ModelFamily("mistral", ("mistral",)),
    ModelFamily("gemma2", ("gemma2",)),
    ModelFamily("gemma3", ("gemma3", "gemma3_text")),
    ModelFamily("phi3", ("phi3",)),
    ModelFamily("gpt_neox", ("gpt_neox",), repeat_kv=None),  # partial rotary, no GQA
):
    register_family(_family)


def families() -> list[ModelFamily]:
    """Every registered family, once each (the tested ones and any added since)."""
    return list(dict.fromkeys(_FAMILIES.values()))


def family_of(model: torch.nn.Module) -> ModelFamily:
    """The family of a model or of one of its modules (by ``config.model_type``);
    :data:`GENERIC` for a model type no family lists."""
    return family_of_type(getattr(getattr(model, "config", None), "model_type", None))


def family_of_type(model_type: str | None) -> ModelFamily:
    """The family of a ``config.model_type`` (a config read before weights load);
    :data:`GENERIC` for a model type no family lists."""
    return _FAMILIES.get(model_type, GENERIC)


def rotary_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The rotary embedding modules of ``model`` (empty for a model without RoPE)."""
    return family_of(model).rotary_modules(model)


def require_rotary(model: torch.nn.Module, what: str) -> None:
    """Raise :class:`NoRotaryEmbeddingError` unless ``model`` has a rotary embedding."""
    if not rotary_modules(model):
        arch = getattr(getattr(model, "config", None), "model_type", type(model).__name__)
        tested = ", ".join(sorted({f.name for f in _FAMILIES.values()}))
        raise NoRotaryEmbeddingError(
            f"{what} needs a model with rotary position embeddings ({tested}, ...), but "
            f"this {arch!r} model has none. Drop positions=/features= for this model; "
            "text perturbations (tasks) still work."
        )


def _modeling_file(module: torch.nn.Module) -> ModuleType:
    return sys.modules[type(module).__module__]
