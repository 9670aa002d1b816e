"""How posgen loads a model: one loader for every command that reads weights.

``posgen run`` (its models through lm-eval's ``hf`` loading, its random-init twins),
``posgen length``, ``posgen decompose`` and ``posgen run --length`` all take a model as a
:class:`~posgen.results.folder.config.ModelEntry` (path or hub id, resolved revision, dtype,
PEFT adapter, remote code, attention implementation, device map) plus a device, and load
it here. The API::

    add_loading_arguments(parser)          # --dtype --revision --trust-remote-code
                                           # --attn-implementation --peft --device-map --device
    entries = model_entries(["PATH"], args, random_init=True, seed=0)  # checked, nothing loads
    device = check_device(args.device)     # None (CUDA when present) or a usable device
    loaded = load_model(entries[0], device, length=scheme)   # LoadedModel(model, tokenizer, record)
    tokenizer = load_tokenizer(entries[0])                    # no weights
    config = load_config(entries[0])                          # no weights
    hflm_kwargs(entry, device)             # the same entry as lm-eval's hf model arguments

Every check raises :class:`LoadError` (a ``PlanError``: one line that says what to do)
before any weights load. ``LoadedModel.record`` is ``entry.to_dict()`` plus the device
and, for a length scheme applied at load (``dynamic``, ``yarn``), the ``from_pretrained``
rope settings it added. A PEFT adapter is loaded onto the model (``PeftModel``) and its
injected base model returned, so hooks see the usual module tree with the adapter active.

Top-level imports stay light: torch, transformers and peft load inside the functions.
"""

from __future__ import annotations

import argparse
import re
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from posgen.harness.run.options import PlanError
from posgen.results.folder.config import ModelEntry, decode_device_map

if TYPE_CHECKING:
    from posgen.perturbations.length import LengthPerturbation

__all__ = [
    "LoadError",
    "LoadedModel",
    "add_loading_arguments",
    "check_device",
    "default_device",
    "hflm_kwargs",
    "load_config",
    "load_model",
    "load_tokenizer",
    "model_entries",
    "random_init_twin",
    "require_rope",
]

_DEVICE = re.compile(r"^(cpu|mps|(cuda|xpu|npu|hpu)(:\d+)?)$")
_DTYPES = {"float32": "float32", "bfloat16": "bfloat16", "float16": "float16"}


class LoadError(PlanError):
    """A model that cannot be loaded as asked; the message says what to do."""


@dataclass
class LoadedModel:
    """A loaded model in eval mode, its tokenizer and what was loaded (JSON data)."""

    model: Any
    tokenizer: Any
    record: dict[str, Any]


def add_loading_arguments(parser: argparse.ArgumentParser) -> None:
    """The model-loading flags of ``posgen run`` (those of lm-eval's ``hf`` model) and
    ``--device``, for every command that loads a model."""
    load = parser.add_argument_group("model loading (as lm-eval's hf model)")
    load.add_argument(
        "--dtype", default="float32", help="float32 (default), bfloat16, float16, auto"
    )
    load.add_argument("--revision", help="hub branch, tag or commit (recorded as its commit)")
    load.add_argument("--trust-remote-code", action="store_true", help="run the hub repo's code")
    load.add_argument("--attn-implementation", help="eager, sdpa, flash_attention_2, ...")
    load.add_argument("--peft", metavar="ADAPTER", help="a PEFT adapter folder or hub id")
    load.add_argument(
        "--device-map",
        metavar="MAP",
        help="place the model with transformers' device_map (lm-eval's parallelize=True): "
        "auto, balanced, balanced_low_0, sequential, a device (cpu, cuda:1), or a JSON "
        'object of module names to devices, e.g. \'{"": "cpu"}\' (not the random-init twin)',
    )
    load.add_argument(
        "--device", help="torch device: cpu, cuda, cuda:N, mps (default: cuda if available)"
    )


def model_entries(
    names: list[str], args: argparse.Namespace, *, random_init: bool = False, seed: int = 0
) -> list[ModelEntry]:
    """One checked entry per model (plus its random-init twin after it), from the loading
    flags of ``args``; nothing loads (a hub id's revision is resolved to its commit)."""
    from posgen.harness.run.options import load_options
    from posgen.harness.run.plan import model_entries as plan_entries

    return plan_entries(names, random_init, seed, load_options(args))


def require_rope(entry: ModelEntry, command: str) -> None:
    """Refuse a model whose config has no rotary position embedding."""
    if not entry.rope:
        raise LoadError(
            f"{entry.path} has no rotary position embedding (its config.json has no rope_* "
            f"or rotary setting); {command} measures RoPE models only"
        )


def check_device(text: str | None) -> str | None:
    """``--device`` checked: None (CUDA when present, else CPU, decided at load) or a
    device of this machine. A malformed name or an absent accelerator is refused."""
    if text is None:
        return None
    text = text.strip()
    m = _DEVICE.match(text)
    if not m:
        raise LoadError(f"--device {text!r}: give cpu, cuda, cuda:N or mps")
    kind = text.split(":")[0]
    if kind == "cpu":
        return text
    import torch

    backend = getattr(torch.backends, kind, None) if kind == "mps" else getattr(torch, kind, None)
    if backend is None or not backend.is_available():
        raise LoadError(
            f"--device {text}: no {kind.upper()} device is available on this machine; "
            "use --device cpu (or leave --device out)"
        )
    if m.group(3) and kind == "cuda" and int(text.split(":")[1]) >= torch.cuda.device_count():
        raise LoadError(
            f"--device {text}: this machine has {torch.cuda.device_count()} CUDA device(s)"
        )
    return text


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

    from posgen.perturbations.seeding import item_rng

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

    from posgen.harness.embedded import resolve_pretrained

    path = resolve_pretrained(entry.path)
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

    from posgen.harness.embedded import resolve_pretrained

    return AutoConfig.from_pretrained(
        resolve_pretrained(entry.path), **_hub_kwargs(entry), **overrides
    )


def load_tokenizer(entry: ModelEntry) -> Any:
    """The entry's tokenizer (its revision and remote-code setting), no weights."""
    from transformers import AutoTokenizer

    from posgen.harness.embedded import resolve_pretrained

    return AutoTokenizer.from_pretrained(resolve_pretrained(entry.path), **_hub_kwargs(entry))


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
