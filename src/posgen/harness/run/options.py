"""The lm-eval options of ``posgen run``: batch size, prompts (few-shot examples, chat
template, system instruction, few-shot examples as turns) and generation arguments, each
checked before any model loads (model loading options:
:mod:`posgen.harness.loading.options`).

Light imports only.
"""

from __future__ import annotations

import argparse
import json
import re
from pathlib import Path
from typing import Any

from posgen.compat import internal
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


def check_include_paths(paths: list[Path] | None) -> tuple[str, ...]:
    """The ``--include-path`` folders (the user's own lm-eval task YAML) as absolute
    paths, so a run's report finds them from any working folder; a missing one is refused."""
    for path in paths or []:
        if not path.is_dir():
            what = "is not a folder" if path.exists() else "no such folder"
            raise PlanError(f"--include-path {path}: {what}")
    return tuple(dict.fromkeys(str(p.resolve()) for p in paths or []))


def prompt_options(args: argparse.Namespace) -> dict[str, Any]:
    """``--num-fewshot``, ``--apply-chat-template``, ``--system-instruction``,
    ``--fewshot-as-multiturn`` and ``--gen-kwargs`` (lm-eval's prompt and generation
    settings), each only when given."""
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
    system = getattr(args, "system_instruction", None)
    if system is not None:
        if not system.strip():
            raise PlanError("--system-instruction: give the instruction's text")
        out["system_instruction"] = system
    multiturn = getattr(args, "fewshot_as_multiturn", None)
    if multiturn is not None:
        if multiturn and not out.get("apply_chat_template"):
            # lm-eval's CLI refuses it too (EvaluatorConfig._validate_arguments)
            raise PlanError(
                "--fewshot-as-multiturn needs --apply-chat-template (few-shot examples "
                "become chat turns only under a chat template)"
            )
        if multiturn != bool(out.get("apply_chat_template")):  # recorded when not the default
            out["fewshot_as_multiturn"] = multiturn
    if getattr(args, "gen_kwargs", None) is not None:
        out["gen_kwargs"] = parse_gen_kwargs(args.gen_kwargs)
    return out


def parse_bool(text: str) -> bool:
    """``--fewshot-as-multiturn``'s value as lm-eval's CLI reads it (true, 1, yes: True)."""
    return text.strip().lower() in ("true", "1", "yes")


def parse_gen_kwargs(text: str) -> dict[str, Any]:
    """``--gen-kwargs`` as lm-eval's CLI reads ``--gen_kwargs``: a JSON object, or
    ``key=value`` pairs split at the commas outside brackets and quotes, each value read
    as true/false, a number, a Python literal (``until=["\\n\\n"]``) or else a string.
    Refused: an empty value, a pair without ``=``, a key that is not a name (generation
    arguments are keyword arguments), a value JSON cannot store in the run's config."""

    if not text.strip():
        raise PlanError("--gen-kwargs: empty; give key=value pairs, e.g. max_gen_toks=64")
    try:
        parsed = internal("lm_eval._cli.utils:try_parse_json")(text)
        if not isinstance(parsed, dict):
            parsed = internal("lm_eval._cli.utils:key_val_to_dict")(text)
    except ValueError as e:
        raise PlanError(f"--gen-kwargs: {e}; give key=value pairs separated by commas") from None
    for key, value in parsed.items():
        if not (isinstance(key, str) and key.isidentifier()):
            raise PlanError(f"--gen-kwargs: {key!r} is not an argument name (in {text!r})")
        parsed[key] = _stored(key, value)
    return parsed


def _stored(key: str, value: Any) -> Any:
    """``value`` as the run's config.json stores it (a tuple becomes a list), or refused."""
    try:
        return json.loads(json.dumps(value, allow_nan=False))
    except (TypeError, ValueError):
        raise PlanError(
            f"--gen-kwargs: {key}={value!r} cannot be recorded; give a finite number, a "
            "string, true/false or a list"
        ) from None
