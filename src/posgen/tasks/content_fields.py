"""Which fields of a task's docs are *content* (perturbed) and which are scaffold.

A field is perturbed after the base task's own ``process_docs`` ran, i.e. on the doc
that the prompt template renders. Only the content fields move; the template text, the
answer choices, the target and (by default) the few-shot examples never do. A
:class:`FieldSpec` may keep part of a field fixed (:mod:`posgen.tasks.field_spec`).

:func:`choose_fields` decides the fields of one task, first rule that applies:

1. ``metadata``: the fields the user named (``lm_eval --metadata '{"posgen_fields": ...}'``,
   ``posgen tasks write --fields``);
2. ``known``: the entry of the task or of its nearest ancestor (tag, group, included
   config) in posgen's table (:mod:`posgen.tasks.content_fields_table`); an ancestor in
   the table's refused list stops with its reason;
3. ``inferred``: the task's ``doc_to_text`` reads exactly one field that neither its
   ``doc_to_target`` nor its ``doc_to_choice`` reads (a template, or a function whose
   reads of the doc are all visible: :mod:`posgen.tasks.doc_fields`);
4. otherwise :class:`UnknownContentFields`, naming the fields the prompt reads and how
   to choose them.

The result, a :class:`FieldChoice`, says which rule decided, for the command's output
and the run's record.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from posgen.tasks.content_fields_table import KNOWN, REFUSED
from posgen.tasks.doc_fields import PARTS, part_reads
from posgen.tasks.field_spec import FieldSpec

__all__ = [
    "FieldChoice",
    "FieldSpec",
    "UnknownContentFields",
    "choose_fields",
    "fields_from_metadata",
    "known_fields",
    "resolve_fields",
]

HOW = ("metadata", "known", "inferred")


class UnknownContentFields(ValueError):
    """posgen does not know which fields of a task are content."""


@dataclass(frozen=True)
class FieldChoice:
    """The content fields of one task and how they were decided.

    ``how``: ``metadata`` (named by the user), ``known`` (posgen's table) or ``inferred``
    (the one field ``doc_to_text`` reads besides the target and the choices);
    ``source``: where the user named them, the table entry (the task or the ancestor it
    inherits from), or the prompt part that was read.
    """

    task: str
    fields: tuple[FieldSpec, ...]
    how: str
    source: str

    def __post_init__(self) -> None:
        if self.how not in HOW:
            raise ValueError(f"FieldChoice.how must be one of {HOW}, got {self.how!r}")

    def describe(self) -> str:
        """One line: the fields and how they were decided."""
        names = ", ".join(f.describe() for f in self.fields)
        plural = "s" * (len(self.fields) > 1)
        head = f"{self.task}: content field{plural} {names}"
        if self.how == "metadata":
            return f"{head}, as chosen with {self.source}"
        if self.how == "known":
            inherited = "" if self.source == self.task else f", entry {self.source!r}"
            return f"{head} (posgen's table{inherited})"
        return (
            f"{head}, inferred: the one field its {self.source} reads that neither "
            "its target nor its choices read"
        )

    def to_dict(self) -> dict[str, Any]:
        """A JSON-ready record (``fields`` as in the perturbed task's own config)."""
        return {
            "fields": [f.to_dict() for f in self.fields],
            "how": self.how,
            "source": self.source,
        }


def known_fields(task: str) -> tuple[FieldSpec, ...]:
    """The table's fields of ``task`` itself (KeyError when it has no entry of its own)."""
    return KNOWN[task].fields


def choose_fields(
    task: str,
    config: Mapping[str, Any],
    *,
    override: Iterable[str] | None = None,
    override_from: str = "--metadata posgen_fields",
    ancestors: Iterable[str] = (),
) -> FieldChoice:
    """The content fields of ``task`` (its full lm-eval ``config``) and how they were
    decided (module doc). ``ancestors``: its tags, groups and included configs, nearest
    first. Raises :class:`UnknownContentFields` when no rule decides."""
    if override:
        names = tuple(FieldSpec(str(f)) for f in override)
        return FieldChoice(task, names, "metadata", override_from)
    for name in (task, *ancestors):
        if name in REFUSED:
            raise UnknownContentFields(_refused_message(task, name))
        if name in KNOWN:
            _check_known(task, name, config)
            return FieldChoice(task, KNOWN[name].fields, "known", name)
    prompt, reads, candidates, visible = _candidates(config)
    if prompt == "doc_to_text" and visible and len(candidates) == 1:
        return FieldChoice(task, (FieldSpec(candidates[0]),), "inferred", prompt)
    raise UnknownContentFields(_unknown_message(task, prompt, reads, candidates))


def resolve_fields(
    base_task: str,
    config: Mapping[str, Any],
    override: Iterable[str] | None = None,
    ancestors: Iterable[str] = (),
) -> tuple[FieldSpec, ...]:
    """The fields of :func:`choose_fields`, without the record of how."""
    return choose_fields(base_task, config, override=override, ancestors=ancestors).fields


def _candidates(config: Mapping[str, Any]) -> tuple[str, Any, list[str], bool]:
    """(prompt part, its reads, the fields it reads that no other part reads, whether
    every part's reads are all visible)."""
    rolling = config.get("output_type") == "loglikelihood_rolling"
    prompt = "doc_to_target" if rolling else "doc_to_text"
    reads = part_reads(config, prompt)
    others = [] if rolling else [part_reads(config, p) for p in PARTS[1:]]
    only = sorted(reads.fields - set().union(*(o.fields for o in others)))
    visible = reads.complete and all(o.complete for o in others)
    return prompt, reads, only if only or rolling else sorted(reads.fields), visible


def _check_known(task: str, key: str, config: Mapping[str, Any]) -> None:
    """Refuse a table entry whose fields this task's prompt visibly does not read (a
    task of the same name, or one including it, with another template)."""
    entry = KNOWN[key]
    reads = part_reads(config, entry.prompt)
    missing = [f.name for f in entry.fields if f.name not in reads.fields]
    if missing and reads.complete:
        via = "" if key == task else f" (entry {key!r})"
        example = json.dumps({"posgen_fields": {task: sorted(reads.fields) or ["FIELD"]}})
        raise UnknownContentFields(
            f"posgen's table gives task {task!r}{via} the content field(s) "
            f"{', '.join(missing)}, but its {entry.prompt} reads "
            f"{', '.join(sorted(reads.fields)) or 'no field'}: it is not the task the table "
            f"describes. Choose its fields with lm_eval --metadata '{example}'."
        )


def _refused_message(task: str, entry: str) -> str:
    via = "" if entry == task else f" (as every task under {entry!r})"
    example = json.dumps({"posgen_fields": {task: ["FIELD"]}})
    return (
        f"posgen does not perturb task {task!r}{via}: {REFUSED[entry]}. To perturb "
        f"fields of your choosing anyway: lm_eval --metadata '{example}'."
    )


def _unknown_message(task: str, prompt: str, reads: Any, candidates: list[str]) -> str:
    shown = ", ".join(sorted(reads.fields)) or "none found"
    if not reads.complete:
        shown += " (and maybe more: it passes the doc to code posgen does not read)"
    why = ""
    if prompt == "doc_to_text" and len(candidates) > 1:
        why = (
            f" Besides the target and the choices it reads {len(candidates)} fields "
            f"({', '.join(candidates)}), so posgen cannot tell which are content."
        )
    example = candidates or ["FIELD"]
    as_json = json.dumps({"posgen_fields": {task: example}})
    return (
        f"posgen does not know which doc fields of task {task!r} are content. "
        f"Its {prompt} reads: {shown}.{why} Choose them with lm_eval --metadata "
        f"'{as_json}', or write a config with "
        f"`posgen tasks write {task} --fields {','.join(example)}`. posgen's table "
        f"covers {len(KNOWN)} lm-eval tasks, groups and tags (`posgen tasks list`)."
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
