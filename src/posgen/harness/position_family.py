"""Position families: where a model's positions enter, beside the rotary adapters of
:mod:`posgen.harness.model_family`.

A decoder-only transformer gets its order signal in one of four ways (transformers 5.x):

- ``rotary``: RoPE rotates queries and keys in every layer (Llama, Qwen, ...; the
  adapters of :mod:`.model_family`);
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
  would silently change nothing. The rule: a model is ``none`` when its family entry says
  which layers use its position code and none does.

:func:`position_family_of` reads the family from ``config.model_type`` (and the config
flags above); :func:`check_schemes` refuses, in one line, what a family cannot take.
The hooks that move positions for the non-rotary families are in
:mod:`posgen.harness.model_side.positions.non_rotary`.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from posgen.perturbations.base import PerturbationError
from posgen.results.tables.decomposition import MEANINGS

if TYPE_CHECKING:
    import torch

KINDS = ("rotary", "absolute", "alibi", "none")

#: what the decomposition's distance term a[i−j] is, per kind


@dataclass(frozen=True)
class PositionFamily:
    """Where one model type's positions enter.

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

    kind: str
    name: str
    model_types: tuple[str, ...]
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


ROTARY = PositionFamily("rotary", "rotary", ())
NONE = PositionFamily("none", "none", ())
_FAMILIES: dict[str, PositionFamily] = {}


def register_position_family(family: PositionFamily) -> PositionFamily:
    """Add a non-rotary family; refuses a model type another family already claims."""
    if family.kind not in KINDS:
        raise ValueError(f"position family kind {family.kind!r}, expected one of {KINDS}")
    for model_type in family.model_types:
        other = _FAMILIES.get(model_type)
        if other is not None and other != family:
            raise ValueError(f"model type {model_type!r} already belongs to {other.name!r}")
    _FAMILIES.update(dict.fromkeys(family.model_types, family))
    return family


for _family in (
    PositionFamily("absolute", "gpt2", ("gpt2",), embedding="wpe", table_rows="n_positions"),
    PositionFamily(
        "absolute",
        "opt",
        ("opt",),
        embedding="embed_positions",
        ids_argument="position_ids",
        offset=2,
        table_rows="max_position_embeddings",
    ),
    PositionFamily("alibi", "bloom", ("bloom",), bias_argument="alibi", bias_form="bloom"),
    PositionFamily(
        "alibi",
        "mpt",
        ("mpt",),
        bias_keys="max_seq_len",
        bias_form="mpt",
        attention="attn",
    ),
    PositionFamily(
        "alibi",
        "falcon",
        ("falcon-alibi",),
        bias_form="falcon",
        block_suffix="DecoderLayer",
    ),
):
    register_position_family(_family)


def _no_rope_layers(read: Any) -> list[int] | None:
    """SmolLM3's per-layer flags (1: the layer applies RoPE, 0: NoPE), else None."""
    flags = read("no_rope_layers")
    return None if flags is None else [int(f) for f in flags]


def position_family_of(model: torch.nn.Module) -> PositionFamily:
    """The position family of ``model`` (by ``config.model_type`` and its flags); an
    unlisted model type is taken as rotary, which :mod:`.model_family` checks."""
    return family_of_model_config(getattr(model, "config", None))


def family_of_model_config(config: Any) -> PositionFamily:
    """The position family of a loaded model config (``PretrainedConfig``, no weights)."""
    return family_of_config(lambda key: getattr(config, key, None))


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


def family_of_config(read: Any) -> PositionFamily:
    """The position family from a config's settings, ``read(key)`` (None when unset)."""
    model_type = read("model_type")
    if model_type == "falcon" and read("alibi"):
        model_type = "falcon-alibi"
    if model_type in _FAMILIES:
        return _FAMILIES[model_type]
    flags = _no_rope_layers(read)
    if flags is not None and not any(flags):
        return NONE
    return ROTARY  # unlisted: model_family's require_rotary refuses it if it has no RoPE


def family_of_folder(path: str) -> PositionFamily | None:
    """The position family of a local model folder from its config.json alone (no torch,
    no weights); None without one (a hub id: loading checks)."""
    config = Path(path) / "config.json"
    if not config.is_file():
        return None
    values = json.loads(config.read_text(encoding="utf-8"))
    return family_of_config(values.get)


def _arch(model: torch.nn.Module) -> str:
    return str(getattr(getattr(model, "config", None), "model_type", type(model).__name__))


def length_refusal(family: PositionFamily, schemes: Iterable[str]) -> str:
    """Why the length schemes ``schemes`` (their strings) do not run on a model of
    ``family`` ('' where they do), worded to follow the model's name: a learned absolute
    table has no row past the trained context C, so no scheme runs past it; ALiBi and a
    model without positions run past C as they are, so only the scheme ``none`` applies.
    ``posgen length`` and ``hf-posgen length=`` refuse with these same words."""
    if family.kind == "absolute":
        return (
            "has learned absolute positions: its table has a row per position up to its "
            "trained context C and none past it, so it cannot run past C"
        )
    if family.kind in ("alibi", "none") and any(s.strip() not in ("", "none") for s in schemes):
        signal = {"alibi": "ALiBi positions", "none": "no position encoding"}[family.kind]
        return f"has {signal} and runs past C as it is; only the scheme none applies"
    return ""


def check_schemes(model: torch.nn.Module, p: Any, what: str) -> PositionFamily:
    """Refuse, in one line, what ``p`` (a ``ModelPerturbation``) asks that ``model``'s
    position family cannot take (``what``: its position and feature specs, '' if none;
    a length scheme: :func:`length_refusal`). Rotary models are checked by
    :mod:`.model_family` as before. Returns the family."""
    family = position_family_of(model)
    if family.kind == "rotary" or not (what or p.length is not None or p.logits is not None):
        return family
    arch = _arch(model)
    _refuse_length(family, p.length, arch)
    if not (what or p.logits is not None):
        return family  # length=none on a model that runs past C as it is
    if family.kind == "none":
        raise PerturbationError(
            f"{what or 'this scheme'}: this {arch!r} model has no position encoding (no "
            "layer applies one; the causal mask is its only order signal), so there are no "
            "positions to perturb; text perturbations (tasks) still work"
        )
    if family.refusal:
        raise PerturbationError(f"{what or 'this scheme'}: {family.refusal}")
    for refused, why in _refusals(family, p):
        if refused:
            raise PerturbationError(why.format(arch=arch, family=family.kind))
    return family


def _refuse_length(family: PositionFamily, length: Any, arch: str) -> None:
    """Refuse ``length=`` (a ``LengthPerturbation`` or None) where :func:`length_refusal`
    says it does not run."""
    why = "" if length is None else length_refusal(family, [length.to_string()])
    if why:
        todo = "drop length=" if family.kind == "absolute" else "give length=none or drop it"
        raise PerturbationError(f"length={length.to_string()}: this {arch!r} model {why}; {todo}")


def _refusals(family: PositionFamily, p: Any) -> list[tuple[bool, str]]:
    """(refused?, why) of each thing a non-rotary family may not take. ``logits=`` runs on
    learned absolute positions (through the attention functions), on BLOOM and MPT (where
    their own attention adds the bias, :mod:`posgen.harness.model_side.alibi.logits`)
    and on Falcon-ALiBi (through its sdpa mask, :mod:`posgen.harness.model_side.alibi.falcon_sdpa`);
    a family registered with a ``logits_refusal`` takes positions, features, ``layers=`` and
    ``heads=`` but not ``logits=``."""
    qk = p.features is not None and getattr(p.features, "where", "") == "qk"
    absolute = family.kind == "absolute"
    moved = p.positions is not None or p.features is not None
    features = p.features.to_string() if qk else ""
    logits = p.logits.to_string() if p.logits is not None else ""
    return [
        (bool(logits and family.logits_refused), f"logits={logits}: {family.logits_refused}"),
        (
            absolute and moved and p.layers is not None,
            "layers=: this {arch!r} model's learned absolute positions enter once, before "
            "the first layer; drop layers= (positions= acts there)",
        ),
        (
            qk,
            f"{features}: qk noise perturbs rotary queries and keys; this {{arch!r}} model "
            "has {family} positions: use features=rope_noise:σ (a jitter of the positions "
            "it sees)",
        ),
    ]
