"""The evidence-depth field protocol: which doc fields are a task's passages, evidence and
question, checked on every document (no lm-eval import).

A task declares it in its YAML, under ``metadata`` (lm-eval keeps the task config's
``metadata`` mapping as it is and hands it to the task; docs/depth.md)::

    metadata:
      posgen_depth:
        passages: docs        # a list of strings: the passages, in document order
        evidence: gold_doc    # an int: the index of the evidence passage in that list
        question: question    # a string: the question, rendered after the passages

posgen's task manager checks each document as the task loads (:func:`check_doc`) and adds
the canonical fields (:data:`PASSAGES`, :data:`EVIDENCE`, :data:`QUESTION`,
:data:`EVIDENCE_DEPTH`; :func:`canonical_fields`) that the model side reads from the
request's document. The task's ``doc_to_text`` renders the passages from the passages
field, so the text form (which reorders that field) changes the prompt, and the position
form finds each passage's span in the rendered context (:func:`passage_char_bounds`),
never from markers added to the text.
"""

from __future__ import annotations

import bisect
import itertools
import numbers
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from posgen.perturbations.base import PerturbationError

PROTOCOL_KEY = "posgen_depth"
ROLES = ("passages", "evidence", "question")
# the canonical fields every document of a task with the protocol carries
PASSAGES = "posgen_passages"
EVIDENCE = "posgen_evidence"
QUESTION = "posgen_question"
EVIDENCE_DEPTH = "posgen_evidence_depth"  # evidence / (k − 1): its depth as rendered
DOCS_HINT = "see docs/depth.md"


class DepthTaskError(PerturbationError):
    """A task or document that cannot take an evidence-depth move; the message says what
    to write. A :class:`PerturbationError`, so the ``lm_eval`` command shows it as one
    line (exit status 2)."""

    origin = "posgen task"  # how the lm_eval command's one-line refusal names it


def declaration_example(passages: str = "FIELD", evidence: str = "FIELD") -> str:
    return (
        f"metadata: {{{PROTOCOL_KEY}: {{passages: {passages}, evidence: {evidence}, "
        "question: FIELD}}"
    )


@dataclass(frozen=True)
class DepthFields:
    """The names of a task's passage, evidence and question fields."""

    passages: str
    evidence: str
    question: str

    def to_dict(self) -> dict[str, str]:
        return {"passages": self.passages, "evidence": self.evidence, "question": self.question}


def missing_protocol(task: str) -> DepthTaskError:
    """The one-line refusal of an evidence-depth move on a task without the protocol."""
    return DepthTaskError(
        f"task {task!r} does not say which of its doc fields are the passages, the evidence "
        f"and the question; add to its YAML: {declaration_example()} ({DOCS_HINT})"
    )


def declared_fields(task: str, metadata: Any) -> DepthFields | None:
    """The protocol a task config's ``metadata`` declares, None when it declares none;
    :class:`DepthTaskError` when the declaration is malformed."""
    if not isinstance(metadata, Mapping) or PROTOCOL_KEY not in metadata:
        return None
    spec = metadata[PROTOCOL_KEY]
    where = f"task {task!r}: metadata.{PROTOCOL_KEY}"
    if not isinstance(spec, Mapping):
        raise DepthTaskError(f"{where} must be a mapping: write {declaration_example()}")
    unknown = sorted(set(map(str, spec)) - set(ROLES))
    if unknown:
        raise DepthTaskError(
            f"{where} has unknown key(s) {unknown}; its keys are {', '.join(ROLES)}"
        )
    for role in ROLES:
        name = spec.get(role)
        if not isinstance(name, str) or not name.strip():
            raise DepthTaskError(
                f"{where} does not name the {role} field: write {role}: FIELD "
                f"({declaration_example()})"
            )
    return DepthFields(*(str(spec[r]).strip() for r in ROLES))


def check_doc(task: str, fields: DepthFields, doc: Mapping[str, Any], doc_id: str) -> None:
    """Refuse (one line naming the task, the document, the field and what to write) a
    document whose passages are not a list of at least two strings, whose evidence is
    not an int index into them, or whose question is not a string."""
    where = f"task {task!r}, doc {doc_id}"
    have = ", ".join(sorted(map(str, doc)))
    for role, name in fields.to_dict().items():
        if name not in doc:
            raise DepthTaskError(
                f"{where}: no field {name!r} (metadata.{PROTOCOL_KEY}.{role}); its fields "
                f"are {have}: name the {role} field there"
            )
    passages = doc[fields.passages]
    if not isinstance(passages, Sequence) or isinstance(passages, (str, bytes)):
        raise DepthTaskError(
            f"{where}: field {fields.passages!r} (the passages) is a "
            f"{type(passages).__name__}, not a list of strings: name a list field"
        )
    if not all(isinstance(p, str) for p in passages):
        raise DepthTaskError(f"{where}: field {fields.passages!r} holds items that are not strings")
    if len(passages) < 2:
        raise DepthTaskError(
            f"{where}: {len(passages)} passage in field {fields.passages!r}; evidence depth "
            "needs at least 2 (the evidence among distractors): drop such documents in the "
            "task's process_docs"
        )
    evidence = doc[fields.evidence]
    if isinstance(evidence, bool) or not isinstance(evidence, numbers.Integral):
        raise DepthTaskError(
            f"{where}: field {fields.evidence!r} (the evidence) is {evidence!r}, not an int "
            "index into the passages"
        )
    if not 0 <= evidence < len(passages):
        raise DepthTaskError(
            f"{where}: evidence index {evidence} in field {fields.evidence!r} is outside the "
            f"{len(passages)} passages (0 to {len(passages) - 1})"
        )
    if not isinstance(doc[fields.question], str):
        raise DepthTaskError(
            f"{where}: field {fields.question!r} (the question) is a "
            f"{type(doc[fields.question]).__name__}, not a string"
        )


def canonical_fields(fields: DepthFields, doc: Mapping[str, Any]) -> dict[str, Any]:
    """The canonical fields of a checked document (:func:`check_doc`)."""
    passages = [str(p) for p in doc[fields.passages]]
    evidence = int(doc[fields.evidence])
    return {
        PASSAGES: passages,
        EVIDENCE: evidence,
        QUESTION: str(doc[fields.question]),
        EVIDENCE_DEPTH: evidence / (len(passages) - 1),
    }


def passage_char_bounds(context: str, passages: Sequence[str], question: str) -> list[int]:
    """Character bounds ``(c_0, ..., c_k)`` of the passage blocks in a rendered context:
    ``c_b`` is where passage b starts (each found after the one before it), ``c_k`` where
    the question starts after the last passage (the end of the last passage when the
    template does not render the question as it is). Block b is ``[c_b, c_{b+1})``: the
    passage and the separator after it. ValueError when a passage is not in the context
    in order (the task's ``doc_to_text`` must render the passages field as it is)."""
    bounds, at = [], 0
    for b, passage in enumerate(passages):
        start = context.find(passage, at)
        if start < 0 or not passage:
            raise ValueError(
                f"passage {b} of {len(passages)} is not in the rendered context after "
                f"character {at}; doc_to_text must render the passages field as it is"
            )
        bounds.append(start)
        at = start + len(passage)
    question_start = context.find(question, at) if question else -1
    bounds.append(question_start if question_start >= 0 else at)
    return bounds


def token_bounds(char_bounds: Sequence[int], token_starts: Sequence[int]) -> list[int]:
    """Token bounds from character bounds: for each ``c``, the first token whose first
    character (``token_starts``, increasing: a tokenizer's offset mapping) is at or after
    ``c``; a token that straddles a boundary belongs to the block it starts in.
    ValueError when two bounds fall on one token (a passage block with no token)."""
    out = [bisect.bisect_left(list(token_starts), c) for c in char_bounds]
    if any(b <= a for a, b in itertools.pairwise(out)):
        raise ValueError(f"passage blocks {out} hold no token of their own")
    return out
