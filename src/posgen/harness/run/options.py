"""The lm-eval options of ``posgen run``: batch size and prompts (few-shot examples, chat
template), each checked before any model loads (model loading options:
:mod:`posgen.harness.loading.options`).

Light imports only.
"""

from __future__ import annotations

import argparse
import re
from typing import Any

from posgen.harness.input_error import InputError


class PlanError(InputError):
    """Invalid ``posgen run`` input; the message says what to do."""


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
