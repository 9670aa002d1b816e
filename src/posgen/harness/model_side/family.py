"""One family registry: per ``config.model_type``, where a model's positions enter and
the names under which it keeps its rotary and attention code.

posgen never re-implements attention or RoPE. It finds the model's own modules and the
functions of the model's modeling file (``transformers.models.<family>.modeling_<family>``)
by name: the rotary embedding module (class name ending in ``RotaryEmbedding``), the
attention modules (``...Attention``), ``eager_attention_forward``, ``apply_rotary_pos_emb``
(which rotates with the family's own ``rotate_half``) and ``repeat_kv``.

A decoder-only transformer gets its order signal in one of four ways (transformers 5.x),
the entry's ``kind``:

- ``rotary``: RoPE rotates queries and keys in every layer (Llama, Qwen, ...);
- ``absolute``: a learned table of position embeddings added to the token embeddings
  once, before the first layer (GPT-2's ``wpe``, OPT's ``embed_positions``, both
  ``nn.Embedding``s the model hands its ``position_ids``);
- ``alibi``: a bias ``−m_h·(i−j)`` added to every layer's attention logits (BLOOM builds
  it from the mask's cumulative sum as ``m_h·j``, softmax being blind to the row constant
  ``−m_h·i``, and hands it to each decoder block as ``alibi=``; MPT hands every block one
  ``[H, 1, L]`` bias ``m_h·(j − L + 1)`` for the whole batch as ``position_bias=``;
  Falcon with ``alibi=True`` builds BLOOM's bias and folds it, divided by √d, into the
  causal mask it hands every block beside ``alibi=``);
- ``none``: no position signal at all, the causal mask being the only order signal.
  transformers represents such a model as SmolLM3 with ``no_rope_layers`` all 0 (every
  layer NoPE): its rotary module still runs but no layer applies it, so a rotary hook
  would silently change nothing. The rule: a model is ``none`` when its config says
  which layers use its position code and none does.

One :class:`ModelFamily` entry per family posgen is tested on; a family that names its
code differently, or whose positions enter elsewhere, registers its own entry with
:func:`register_family`, and everything that needs it (position hooks, qk noise,
attention capture, the refusals of :mod:`.family_checks`) follows. :func:`family_of`
reads a model's entry from its config; an unlisted model type is taken as rotary under
transformers' common names (:data:`GENERIC`), which :func:`require_rotary` checks.
"""

from __future__ import annotations

import json
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

from posgen.compat import rotary_function
from posgen.results.tables.decomposition import MEANINGS

if TYPE_CHECKING:  # annotations only: the module stays light to import
    import torch

KINDS = ("rotary", "absolute", "alibi", "none")


class NoRotaryEmbeddingError(ValueError):
    """The model has no rotary position embedding for position/feature schemes to act on."""


@dataclass(frozen=True)
class ModelFamily:
    """One model family: its model types, where its positions enter (``kind``) and the
    names under which it keeps its rotary and attention code.

    Rotary and attention code (every kind: an ALiBi model's attention is wrapped too):
    ``rotary_suffix``, ``attention_suffix`` the class-name suffixes of its rotary and
    attention modules, ``eager_attention``, ``apply_rotary`` (``(q, k, cos, sin)`` ->
    rotated ``(q, k)``) and ``repeat_kv`` (None: no grouped KV heads) the functions of its
    modeling file.

    Where the positions of a non-rotary family enter:

    - ``embedding``: the absolute family's position-embedding attribute (a module whose
      qualified name ends with it), ``ids_argument`` the name its forward takes the
      position ids under (``input``, ``nn.Embedding``'s first argument, or
      ``position_ids``) and ``offset`` the table rows before position 0 (OPT: 2).
    - ``bias_argument``: the ALiBi family whose attention computes its logits as
      ``bias.baddbmm(q, kᵀ)`` (BLOOM): the keyword of the decoder block that carries the
      bias ``[B·H, 1, K]`` (``alibi``); the decomposition and ``logits=`` wrap it there.
    - ``bias_form``: how an ALiBi block is handed its bias, which the position hooks
      replace (:mod:`posgen.harness.model_side.alibi.rows`): ``bloom``, ``mpt`` or
      ``falcon``; ``block_suffix`` the blocks' class suffix, ``attention`` the blocks'
      attention attribute.
    - ``bias_keys``: the config field bounding the keys an ALiBi bias covers ('' when it
      is built from the mask at any length): MPT builds one bias over ``max_seq_len``
      keys and its attention slices the last K columns, so it cannot run past it.
    - ``table_rows``: the absolute family's config field holding its table's positions
      (GPT-2's ``n_positions``, OPT's ``max_position_embeddings``): no row past them.
    - ``refusal``: why position schemes are refused on this family ('' if they run).
    - ``logits_refusal``: why ``logits=`` and the commands that fit the attention's
      logits (decompose, cause, the run's fit) are refused on this family ('' if they run).
    """

    name: str
    model_types: tuple[str, ...]  # config.model_type values of the family
    kind: str = "rotary"
    rotary_suffix: str = "RotaryEmbedding"
    attention_suffix: str = "Attention"
    eager_attention: str = "eager_attention_forward"
    apply_rotary: str = "apply_rotary_pos_emb"
    repeat_kv: str | None = "repeat_kv"
    embedding: str = ""
    ids_argument: str = "input"
    offset: int = 0
    bias_argument: str = ""
    bias_form: str = ""
    block_suffix: str = "Block"
    attention: str = "self_attention"
    bias_keys: str = ""
    table_rows: str = ""
    refusal: str = ""
    logits_refusal: str = ""

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
                "(posgen.harness.model_side.family.register_family)"
            )
        return fn

    @property
    def logits_refused(self) -> str:
        """Why ``logits=`` and the commands that fit the logits do not run on this family
        ('' where they do: the capture reads them from the model's own forward): its
        registered ``logits_refusal``, or an ALiBi form the capture does not read (it reads
        BLOOM's baddbmm, MPT's bias addition and Falcon's sdpa call)."""
        if self.logits_refusal or self.kind != "alibi":
            return self.logits_refusal
        if self.bias_form in ("bloom", "mpt", "falcon"):
            return ""
        return f"{self.name}: posgen reads no ALiBi logits of the form {self.bias_form!r}"

    @property
    def length_field(self) -> str:
        """The config field bounding the tokens one forward takes ('' where any length
        runs): a learned table's positions, or the keys of an ALiBi bias built once."""
        return self.table_rows or self.bias_keys

    @property
    def meaning(self) -> str:
        """What the decomposition's a[i−j] means in this family."""
        return MEANINGS[self.kind]

    def embedding_module(self, model: torch.nn.Module) -> torch.nn.Module:
        """The absolute position table (an ``nn.Embedding`` or subclass)."""
        for name, module in model.named_modules():
            if name.split(".")[-1] == self.embedding:
                return module
        raise RuntimeError(f"{type(model).__name__} has no position embedding {self.embedding!r}")

    def blocks(self, model: torch.nn.Module) -> list[torch.nn.Module]:
        """The decoder blocks, in layer order (ALiBi: each takes the bias)."""
        found = [m for m in model.modules() if type(m).__name__.endswith(self.block_suffix)]
        return sorted(found, key=lambda m: int(getattr(m, self.attention).layer_idx))


_FAMILIES: dict[str, ModelFamily] = {}
GENERIC = ModelFamily("generic", ())  # transformers' common names, for unlisted families
NONE = ModelFamily("none", (), kind="none")  # every layer NoPE (SmolLM3's no_rope_layers)


def register_family(family: ModelFamily) -> ModelFamily:
    """Add a family; refuses an unknown kind and a model type another family already
    claims."""
    if family.kind not in KINDS:
        raise ValueError(f"family kind {family.kind!r}, expected one of {KINDS}")
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
    ModelFamily("gpt2", ("gpt2",), kind="absolute", embedding="wpe", table_rows="n_positions"),
    ModelFamily(
        "opt",
        ("opt",),
        kind="absolute",
        embedding="embed_positions",
        ids_argument="position_ids",
        offset=2,
        table_rows="max_position_embeddings",
    ),
    ModelFamily("bloom", ("bloom",), kind="alibi", bias_argument="alibi", bias_form="bloom"),
    ModelFamily(
        "mpt", ("mpt",), kind="alibi", bias_keys="max_seq_len", bias_form="mpt", attention="attn"
    ),
    ModelFamily(
        "falcon", ("falcon-alibi",), kind="alibi", bias_form="falcon", block_suffix="DecoderLayer"
    ),
):
    register_family(_family)


def families(kind: str | None = None) -> list[ModelFamily]:
    """Every registered family of ``kind`` (None: every kind), once each (the tested ones
    and any added since)."""
    return [f for f in dict.fromkeys(_FAMILIES.values()) if kind in (None, f.kind)]


def family_of(model: torch.nn.Module) -> ModelFamily:
    """The family of a model or of one of its modules (by its ``config``)."""
    return family_of_model_config(getattr(model, "config", None))


def family_of_model_config(config: Any) -> ModelFamily:
    """The family of a loaded model config (``PretrainedConfig``, no weights)."""
    return family_of_config(lambda key: getattr(config, key, None))


def family_of_type(model_type: str | None) -> ModelFamily:
    """The family of a ``config.model_type`` alone (a config read before weights load, for
    its rotary code); :data:`GENERIC` for a model type no family lists."""
    return _FAMILIES.get(model_type, GENERIC)


def _no_rope_layers(read: Any) -> list[int] | None:
    """SmolLM3's per-layer flags (1: the layer applies RoPE, 0: NoPE), else None."""
    flags = read("no_rope_layers")
    return None if flags is None else [int(f) for f in flags]


def family_of_config(read: Any) -> ModelFamily:
    """The family from a config's settings, ``read(key)`` (None when unset): its model
    type (Falcon with ``alibi`` set: ``falcon-alibi``), :data:`NONE` where every layer is
    NoPE, else :data:`GENERIC` (rotary; :func:`require_rotary` refuses it without RoPE)."""
    model_type = read("model_type")
    if model_type == "falcon" and read("alibi"):
        model_type = "falcon-alibi"
    if model_type in _FAMILIES:
        return _FAMILIES[model_type]
    flags = _no_rope_layers(read)
    if flags is not None and not any(flags):
        return NONE
    return GENERIC


def family_of_folder(path: str) -> ModelFamily | None:
    """The family of a local model folder from its config.json alone (no torch, no
    weights); None without one (a hub id: loading checks)."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return None
    values = json.loads(config.read_text(encoding="utf-8"))
    return family_of_config(values.get)


def length_limit(config: Any) -> tuple[str, int] | None:
    """(config field, value): the most tokens one forward of a model with this loaded
    config takes, where its position code bounds them: a learned table's rows (GPT-2's
    ``n_positions``, OPT's ``max_position_embeddings``: no row past them) or the keys of
    an ALiBi bias built once (MPT's ``max_seq_len``); None where any length runs (RoPE
    past its trained context, BLOOM's and Falcon's bias built from the mask, no positions)."""
    family = family_of_model_config(config)
    field = family.length_field
    value = getattr(config, field, None) if field else None
    return None if value is None else (field, int(value))


def trained_context(config: Any) -> tuple[str, int] | None:
    """(config field, value): the trained context C of a model with this loaded config:
    its ``max_position_embeddings`` (GPT-2's ``n_positions`` through the config's
    attribute map), else (MPT) the keys its ALiBi bias covers (``max_seq_len``); None
    where the config names neither. Reads the config, no weights."""
    value = getattr(config, "max_position_embeddings", None)
    if value is not None:
        return "max_position_embeddings", int(value)
    field = family_of_model_config(config).bias_keys
    value = getattr(config, field, None) if field else None
    return None if value is None else (field, int(value))


def rotary_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The rotary embedding modules of ``model`` (empty for a model without RoPE)."""
    return family_of(model).rotary_modules(model)


def require_rotary(model: torch.nn.Module, what: str) -> None:
    """Raise :class:`NoRotaryEmbeddingError` unless ``model`` has a rotary embedding."""
    if not rotary_modules(model):
        arch = getattr(getattr(model, "config", None), "model_type", type(model).__name__)
        tested = ", ".join(sorted({f.name for f in families("rotary")}))
        raise NoRotaryEmbeddingError(
            f"{what} needs a model with rotary position embeddings ({tested}, ...), but "
            f"this {arch!r} model has none. Drop positions=/features= for this model; "
            "text perturbations (tasks) still work."
        )


def _modeling_file(module: torch.nn.Module) -> ModuleType:
    return sys.modules[type(module).__module__]
