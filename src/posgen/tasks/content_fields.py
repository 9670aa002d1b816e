"""Which fields of a task's docs are *content* (perturbed) and which are scaffold.

A field is perturbed after the base task's own ``process_docs`` ran, i.e. on the doc
that the prompt template renders. Only the content fields move; the template text, the
answer choices, the target and (by default) the few-shot examples never do.

A :class:`FieldSpec` may protect part of a field: ``keep_last`` final words stay in
place (LAMBADA's last word is its target), ``after`` keeps everything up to and
including the first occurrence of a marker (HellaSwag's ``"<activity label>: "``),
``before`` keeps everything from the first occurrence of a marker on (WinoGrande's
blank ``_`` and the scored continuation after it).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class FieldSpec:
    """One content field of a doc and the part of it that stays fixed."""

    name: str
    keep_last: int = 0
    after: str | None = None
    before: str | None = None

    def split(self, value: str) -> tuple[str, str, str]:
        """(fixed prefix, movable middle, fixed suffix) of a field value."""
        head, body, tail = "", value, ""
        if self.after is not None and self.after in body:
            i = body.index(self.after) + len(self.after)
            head, body = body[:i], body[i:]
        if self.before is not None and self.before in body:
            i = body.index(self.before)
            body, tail = body[:i], body[i:]
        return head, body, tail


def _fields(*names: str) -> tuple[FieldSpec, ...]:
    return tuple(FieldSpec(n) for n in names)


KNOWN_FIELDS: dict[str, tuple[FieldSpec, ...]] = {
    "posgen_prose": _fields("text"),
    "posgen_cloze": _fields("context"),
    "posgen_recall": _fields("passage"),
    "hellaswag": (FieldSpec("query", after=": "),),
    "arc_easy": _fields("question"),
    "arc_challenge": _fields("question"),
    "piqa": _fields("goal"),
    "winogrande": (FieldSpec("sentence", before="_"),),
    "lambada_openai": (FieldSpec("text", keep_last=1),),
    "lambada_standard": (FieldSpec("text", keep_last=1),),
    "boolq": _fields("passage", "question"),
    "wikitext": _fields("page"),
}

_TEMPLATE_VAR = re.compile(r"{{\s*([A-Za-z_][A-Za-z0-9_]*)")


class UnknownContentFields(ValueError):
    """posgen does not know which fields of a task are content."""


def template_fields(template: Any) -> list[str]:
    """Doc fields a Jinja template reads (``"Question: {{question}}"`` -> ``["question"]``)."""
    if not isinstance(template, str):
        return []
    return sorted(set(_TEMPLATE_VAR.findall(template)))


def _is_rolling(config: Mapping[str, Any]) -> bool:
    """A perplexity task: the text scored is its ``doc_to_target`` (``doc_to_text`` is "")."""
    return config.get("output_type") == "loglikelihood_rolling"


def candidate_fields(config: Mapping[str, Any]) -> list[str]:
    """Fields the prompt reads and the answer does not: the likely content fields (for a
    rolling-loglikelihood task, the fields its ``doc_to_target`` reads)."""
    if _is_rolling(config):
        target = config.get("doc_to_target")
        found = template_fields(target)
        return found or ([target] if isinstance(target, str) and target.isidentifier() else [])
    text = template_fields(config.get("doc_to_text"))
    if not text and isinstance(config.get("doc_to_text"), str) and config["doc_to_text"]:
        text = [config["doc_to_text"]]  # a bare field name
    answer = set(template_fields(config.get("doc_to_target"))) | set(
        template_fields(config.get("doc_to_choice"))
    )
    return [f for f in text if f not in answer] or text


def resolve_fields(
    base_task: str, config: Mapping[str, Any], override: Iterable[str] | None = None
) -> tuple[FieldSpec, ...]:
    """The content fields of ``base_task``: ``override`` if given, else the known ones.

    Raises :class:`UnknownContentFields` naming the fields the task's prompt reads and
    how to choose them.
    """
    if override:
        return tuple(FieldSpec(str(f)) for f in override)
    if base_task in KNOWN_FIELDS:
        return KNOWN_FIELDS[base_task]
    cands = candidate_fields(config)
    where = "doc_to_target" if _is_rolling(config) else "doc_to_text"
    shown = ", ".join(cands) if cands else "none found (it is a function or no template)"
    example = cands or ["FIELD"]
    as_json = json.dumps({"posgen_fields": {base_task: example}})
    raise UnknownContentFields(
        f"posgen does not know which doc fields of task {base_task!r} are content. "
        f"Its {where} reads: {shown}. Choose them with lm_eval --metadata '{as_json}', "
        f"or write a config with `posgen tasks write {base_task} --fields {','.join(example)}`. "
        f"Known tasks: {', '.join(sorted(KNOWN_FIELDS))}."
    )


def fields_from_metadata(metadata: Mapping[str, Any] | None, base_task: str) -> list[str] | None:
    """``posgen_fields`` from lm-eval ``--metadata``: a list (every task) or {task: list}."""
    chosen = (metadata or {}).get("posgen_fields")
    if chosen is None:
        return None
    if isinstance(chosen, Mapping):
        chosen = chosen.get(base_task)
    if isinstance(chosen, str):
        chosen = chosen.split(",")
    return [str(f).strip() for f in chosen] if chosen else None
