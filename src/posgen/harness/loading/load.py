"""Loading a model entry: weights, config, tokenizer, random-init twins.

Top-level imports stay light: torch, transformers and peft load inside the functions.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from posgen.compat import CompatError, require
from posgen.harness import embedded  # looked up at call time (tests replace it)
from posgen.harness.loading.options import LoadError
from posgen.harness.model_side.family import family_of_type, length_limit
from posgen.perturbations.seeding import item_rng
from posgen.results.folder.config import ModelEntry, decode_device_map

if TYPE_CHECKING:
    from posgen.perturbations.length import LengthPerturbation

_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


@dataclass
class LoadedModel:
    """A loaded model in eval mode, its tokenizer and what was loaded (JSON data)."""

    model: Any
    tokenizer: Any
    record: dict[str, Any]


def default_device() -> str:
    """``cuda`` when torch sees a CUDA device, else ``cpu`` (as ``posgen run``)."""
    import torch

    return "cuda" if torch.cuda.is_available() else "cpu"


def hflm_kwargs(entry: ModelEntry, device: str | None) -> dict[str, Any]:
    """The entry as keyword arguments of lm-eval's ``hf`` model (``HFPosgenLM``) beside
    ``pretrained``: device, dtype and the loading options (none for a random-init twin,
    which is built here and passed in loaded)."""
    return {
        "device": device or default_device(),
        "dtype": entry.dtype,
        **({} if entry.random_init else entry.load_options()),
    }


def random_init_twin(config: Any, *, seed: int, name: str) -> Any:
    """The architecture of ``config`` with random weights (float32, eval mode) from a torch
    seed derived from (``seed``, ``name``) with posgen.seeding."""
    import torch
    from transformers import AutoModelForCausalLM

    torch_seed = int(item_rng(seed, "random-init-twin", name).integers(0, 2**62))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(torch_seed)
        return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


def load_model(
    entry: ModelEntry,
    device: str | None = None,
    *,
    length: LengthPerturbation | None = None,
    seed: int = 0,
) -> LoadedModel:
    """Load ``entry`` on ``device`` (None: CUDA when present) in eval mode.

    ``length``: a length scheme; a rope scaling (``dynamic``, ``yarn``) adds its
    ``rope_parameters`` and ``max_position_embeddings`` to ``from_pretrained`` (editing a
    built model's config does nothing: the rotary module reads it in ``__init__``).
    ``seed``: the seed of a random-init twin (``entry.random_init``), whose weights are
    drawn from (seed, ``entry.path``); it is cast to the entry's dtype."""
    import torch
    from transformers import AutoModelForCausalLM

    path = embedded.resolve_pretrained(entry.path)
    common = _hub_kwargs(entry)
    config = load_config(entry)
    rope = length.load_kwargs(config) if length is not None else {}
    tokenizer = load_tokenizer(entry)
    device = device or default_device()
    if entry.random_init:
        config = load_config(entry, **rope) if rope else config
        model = random_init_twin(config, seed=seed, name=entry.path)
        if entry.dtype in _DTYPES:
            model = model.to(getattr(torch, _DTYPES[entry.dtype]))
        model = model.to(device)
    else:
        kwargs: dict[str, Any] = {**common, **rope, "dtype": _torch_dtype(entry.dtype)}
        if entry.attn_implementation:
            kwargs["attn_implementation"] = entry.attn_implementation
        if entry.device_map:
            kwargs["device_map"] = decode_device_map(entry.device_map)
        model = AutoModelForCausalLM.from_pretrained(path, **kwargs)
        if entry.peft:
            model = _with_adapter(model, entry.peft)
        if not entry.device_map:
            model = model.to(device)
    record = {**entry.to_dict(), "device": str(_model_device(model))}
    if rope:
        record["rope"] = {k: v for k, v in rope.items() if k != "trust_remote_code"}
    return LoadedModel(model.eval(), tokenizer, record)


def load_config(entry: ModelEntry, **overrides: Any) -> Any:
    """The entry's transformers config (its revision and remote-code setting), no weights;
    ``overrides`` set config attributes as ``from_pretrained`` keyword arguments do."""
    from transformers import AutoConfig

    return AutoConfig.from_pretrained(
        embedded.resolve_pretrained(entry.path), **_hub_kwargs(entry), **overrides
    )


def position_limit(entry: ModelEntry) -> tuple[str, int] | None:
    """(config field, value): the most tokens one forward of the entry's model takes,
    where its position code bounds them (a learned table's rows, the keys of an ALiBi
    bias built once: :func:`posgen.harness.model_side.family.length_limit`); None where any
    length runs. Reads the config, no weights."""
    return length_limit(load_config(entry))


def held_to_limit(
    model: str, limit: tuple[str, int] | None, flag: str, given: int | None, default: int
) -> tuple[int, str | None]:
    """The tokens per window of ``flag`` for ``model`` (its path) with ``limit``, its
    :func:`position_limit`: ``given``, refused past the limit; else ``default`` held to
    it, with a note that says so (None when the default fits)."""
    value = default if given is None else given
    if limit is None or value <= limit[1]:
        return value, None
    field, most = limit
    why = f"{model}'s config sets {field} = {most}, the most positions one forward of it takes"
    if given is not None:
        raise LoadError(f"{flag} {given}: {why}; pass {flag} {most} or less")
    return most, f"{flag} {most}, not the default {default}: {why}"


def require_compatible(entries: Iterable[ModelEntry]) -> None:
    """:func:`posgen.compat.require` for a run on these models (their configs are read, no
    weights): every lm-eval, transformers and torch internal posgen uses, and the rotary
    function of each model's family. Commands call it before their first cell, so an
    installed release that moved an internal stops a run before any work, not after its
    cells. Raises :class:`LoadError` (an ``InputError``) with compat's message."""

    families = {family_of_type(getattr(load_config(e), "model_type", None)).name for e in entries}
    try:
        require(families)
    except CompatError as e:
        raise LoadError(str(e)) from None


def load_tokenizer(entry: ModelEntry) -> Any:
    """The entry's tokenizer (its revision and remote-code setting), no weights."""
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(
        embedded.resolve_pretrained(entry.path), **_hub_kwargs(entry)
    )


def _hub_kwargs(entry: ModelEntry) -> dict[str, Any]:
    """``revision`` (a hub model's resolved commit) and ``trust_remote_code``, for every
    ``from_pretrained`` of the entry."""
    out = {k: v for k, v in entry.load_options().items() if k in ("revision",)}
    if entry.trust_remote_code:
        out["trust_remote_code"] = True
    return out


def _torch_dtype(name: str) -> Any:
    import torch

    return "auto" if name == "auto" else getattr(torch, _DTYPES[name])


def _with_adapter(model: Any, adapter: str) -> Any:
    """``model`` with the PEFT adapter's weights active (the ``PeftModel``'s injected base
    model: the usual module tree, adapter layers in place)."""
    try:
        from peft import PeftModel
    except ImportError:
        raise LoadError("--peft needs the peft package: pip install peft") from None
    return PeftModel.from_pretrained(model, adapter).get_base_model()


def _model_device(model: Any) -> Any:
    return next(model.parameters()).device
