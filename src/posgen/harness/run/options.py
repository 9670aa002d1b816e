"""The lm-eval options of ``posgen run``: model loading (as lm-eval's ``hf`` model), batch
size and prompts (few-shot examples, chat template), each checked before any model loads.

Light imports only.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$")


class PlanError(ValueError):
    """Invalid ``posgen run`` input; the message says what to do."""


def load_options(args: argparse.Namespace) -> dict[str, Any]:
    """The model-loading flags of ``posgen run`` (those of lm-eval's ``hf`` model)."""
    out: dict[str, Any] = {}
    dtype = getattr(args, "dtype", None) or "float32"
    if dtype not in ("float32", "bfloat16", "float16", "auto"):
        raise PlanError(f"--dtype: {dtype!r}; give float32, bfloat16, float16 or auto")
    out["dtype"] = dtype
    for key in ("revision", "attn_implementation", "peft"):
        if getattr(args, key, None):
            out[key] = getattr(args, key)
    if getattr(args, "trust_remote_code", False):
        out["trust_remote_code"] = True
    if getattr(args, "device_map", None):
        out["device_map"] = check_device_map(args.device_map)
    peft = out.get("peft")
    if peft and not Path(peft).expanduser().is_dir() and not HUB_ID.match(peft):
        raise PlanError(f"--peft {out['peft']!r}: no such adapter folder (nor a hub id)")
    return out


DEVICE_MAP_STRATEGIES = ("auto", "balanced", "balanced_low_0", "sequential")
_DEVICE = re.compile(r"^(cpu|mps|disk|(cuda|xpu|npu|hpu)(:\d+)?|\d+)$")


def check_device_map(text: str) -> str:
    """``--device-map``: a strategy of accelerate (auto, balanced, balanced_low_0,
    sequential), one device (cpu, cuda, cuda:1, ...), or a JSON object mapping module
    names to devices (``{"": "cpu"}``, ``{"model.layers.0": 0, ...}``)."""
    text = text.strip()
    if text in DEVICE_MAP_STRATEGIES or _DEVICE.match(text):
        return text
    hint = (
        f"give {', '.join(DEVICE_MAP_STRATEGIES)}, a device (cpu, cuda, cuda:N) or a JSON "
        'object of module names to devices, e.g. \'{"": "cpu"}\''
    )
    if not text.startswith("{"):
        raise PlanError(f"--device-map {text!r}: {hint}")
    try:
        mapping = json.loads(text)
    except json.JSONDecodeError as e:
        raise PlanError(f"--device-map: not valid JSON ({e}); {hint}") from None
    bad = [
        f"{k!r}: {v!r}"
        for k, v in mapping.items()
        if not ((type(v) is int and v >= 0) or (isinstance(v, str) and _DEVICE.match(v)))
    ]
    if not mapping or bad:
        raise PlanError(f"--device-map: {', '.join(bad) or 'an empty object'}; {hint}")
    return json.dumps(mapping, sort_keys=True)


def parse_batch_size(text: str) -> int | str:
    """``8``, ``auto`` or ``auto:N`` (lm-eval's forms)."""
    if re.fullmatch(r"auto(:[1-9]\d*)?", text.strip()):
        return text.strip()
    if text.strip().isdigit() and int(text) >= 1:
        return int(text)
    raise PlanError(f"--batch-size: {text!r}; give an integer >= 1, auto or auto:N")


def prompt_options(args: argparse.Namespace) -> dict[str, Any]:
    """``--num-fewshot`` and ``--apply-chat-template`` (lm-eval's prompt settings)."""
    out: dict[str, Any] = {}
    shots = getattr(args, "num_fewshot", None)
    if shots is not None:
        if shots < 0:
            raise PlanError(f"--num-fewshot must be >= 0, got {shots}")
        out["num_fewshot"] = shots
    template = getattr(args, "apply_chat_template", None)
    if template is not None and template is not False:
        if isinstance(template, str) and not template.strip():
            raise PlanError("--apply-chat-template: give a template name, or no value")
        out["apply_chat_template"] = template.strip() if isinstance(template, str) else True
    return out
