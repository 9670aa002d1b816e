"""The model-loading flags every command that loads a model shares, checked without
loading anything: ``--dtype --revision --trust-remote-code --attn-implementation --peft
--device-map`` (those of lm-eval's ``hf`` model) as a typed :class:`LoadOptions`, and
``--device``.

A device name is checked by one pattern (:data:`DEVICE`): ``--device`` takes it (and
needs the accelerator to be there), ``--device-map`` takes it per module (or ``disk``, or a
device index).
"""

from __future__ import annotations

import argparse
import json
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from posgen.harness.input_error import InputError

DTYPES = ("float32", "bfloat16", "float16", "auto")
DEVICE = re.compile(r"^(cpu|mps|(cuda|xpu|npu|hpu)(:\d+)?)$")
DEVICE_MAP_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class LoadError(InputError):
    """A model that cannot be loaded as asked; the message says what to do."""


@dataclass(frozen=True)
class LoadOptions:
    """How to load a model beyond its path: lm-eval ``hf`` model's loading options.

    ``revision`` is what the user asked for (a hub branch, tag or commit; resolved to its
    commit in the entry); ``device_map`` is canonical (:func:`check_device_map`)."""

    dtype: str = "float32"
    revision: str | None = None
    trust_remote_code: bool = False
    attn_implementation: str | None = None
    peft: str | None = None
    device_map: str | None = None

    def __post_init__(self) -> None:
        if self.dtype not in DTYPES:
            raise LoadError(f"--dtype: {self.dtype!r}; give float32, bfloat16, float16 or auto")
        peft = self.peft
        if peft and not Path(peft).expanduser().is_dir() and not HUB_ID.match(peft):
            raise LoadError(f"--peft {peft!r}: no such adapter folder (nor a hub id)")

    @classmethod
    def from_args(cls, args: argparse.Namespace) -> LoadOptions:
        """The flags of :func:`add_loading_arguments` (absent ones at their defaults)."""
        device_map = getattr(args, "device_map", None)
        return cls(
            dtype=getattr(args, "dtype", None) or "float32",
            revision=getattr(args, "revision", None) or None,
            trust_remote_code=bool(getattr(args, "trust_remote_code", False)),
            attn_implementation=getattr(args, "attn_implementation", None) or None,
            peft=getattr(args, "peft", None) or None,
            device_map=check_device_map(device_map) if device_map else None,
        )

    def entry_fields(self) -> dict[str, Any]:
        """The options as :class:`~posgen.results.folder.config.ModelEntry` fields (the
        revision is resolved separately)."""
        return {k: v for k, v in asdict(self).items() if k != "revision"}


def add_loading_arguments(parser: argparse.ArgumentParser) -> None:
    """The model-loading flags of ``posgen run`` (those of lm-eval's ``hf`` model) and
    ``--device``, for every command that loads a model."""
    load = parser.add_argument_group("model loading (as lm-eval's hf model)")
    load.add_argument(
        "--dtype", default="float32", help="float32 (default), bfloat16, float16, auto"
    )
    load.add_argument(
        "--revision", help="hub branch, tag or commit (recorded as its commit; hub models only)"
    )
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


def check_device(text: str | None) -> str | None:
    """``--device`` checked: None (CUDA when present, else CPU, decided at load) or a
    device of this machine. A malformed name or an absent accelerator is refused."""
    if text is None:
        return None
    text = text.strip()
    m = DEVICE.match(text)
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


def _map_device(value: Any) -> bool:
    """A ``device_map`` value: a device name, ``disk``, or a device index."""
    if isinstance(value, str):
        return bool(DEVICE.match(value)) or value == "disk" or value.isdigit()
    return type(value) is int and value >= 0


def check_device_map(text: str) -> str:
    """``--device-map``: a strategy of accelerate (auto, balanced, balanced_low_0,
    sequential), one device (cpu, cuda, cuda:1, ...), or a JSON object mapping module
    names to devices (``{"": "cpu"}``, ``{"model.layers.0": 0, ...}``), canonical."""
    text = text.strip()
    if text in DEVICE_MAP_STRATEGIES or _map_device(text):
        return text
    hint = (
        f"give {', '.join(DEVICE_MAP_STRATEGIES)}, a device (cpu, cuda, cuda:N) or a JSON "
        'object of module names to devices, e.g. \'{"": "cpu"}\''
    )
    if not text.startswith("{"):
        raise LoadError(f"--device-map {text!r}: {hint}")
    try:
        mapping = json.loads(text)
    except json.JSONDecodeError as e:
        raise LoadError(f"--device-map: not valid JSON ({e}); {hint}") from None
    bad = [f"{k!r}: {v!r}" for k, v in mapping.items() if not _map_device(v)]
    if not mapping or bad:
        raise LoadError(f"--device-map: {', '.join(bad) or 'an empty object'}; {hint}")
    return json.dumps(mapping, sort_keys=True)
