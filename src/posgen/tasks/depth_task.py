"""lm-eval tasks with the evidence-depth protocol: every document checked and given the
canonical fields, and, for ``perm_depth_<D>_<task>``, its evidence passage moved.

:class:`DepthTaskMixin` goes before a task's own class (:func:`depth_class`); posgen's task
manager puts it there for every task whose config declares ``metadata.posgen_depth``
(:mod:`posgen.tasks.depth_protocol`). Data flow::

    base dataset -> base process_docs -> check, (move the evidence), canonical fields -> prompt

The base task's ``process_docs`` runs unchanged: the mixin wraps the evaluation docs it
returns. A moved task carries ``posgen_depth_perturbation`` (a
:class:`DepthTaskPerturbation` as a dict) in its config, popped before lm-eval sees it.

Each document gains ``posgen_doc_id``, the canonical fields (``posgen_passages``,
``posgen_evidence``, ``posgen_question``, ``posgen_evidence_depth``: evidence / (k − 1)
as rendered) and ``posgen_k``; a moved one also ``posgen_depth_nominal`` (D),
``posgen_depth_source`` (the evidence's index before the move) and the passage order's
statistics under the names a word-order task uses (``posgen_n`` = k, ``posgen_fraction_moved``,
``posgen_mean_displacement`` in passages, ``posgen_dnd``, ``posgen_idc``,
``posgen_too_short`` False). Few-shot examples are not moved.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from lm_eval.api.task import ConfigurableTask

from posgen.perturbations import registry
from posgen.perturbations.depth import DepthRecord, EvidenceDepth
from posgen.perturbations.order_stats import order_stats
from posgen.tasks import depth_protocol as protocol
from posgen.tasks.doc_ids import DOC_ID, stable_ids

DEPTH_KEY = "posgen_depth_perturbation"
K = "posgen_k"
NOMINAL = "posgen_depth_nominal"
SOURCE = "posgen_depth_source"


@dataclass(frozen=True)
class DepthTaskPerturbation:
    """What a moved task does: the depth, the seed (kept; no draw is needed), the base."""

    perturbation: EvidenceDepth
    seed: int
    base_task: str

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.perturbation.spec.to_dict(),
            "seed": self.seed,
            "base_task": self.base_task,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> DepthTaskPerturbation:
        p = registry.from_spec(data["spec"])
        if not isinstance(p, EvidenceDepth):
            raise TypeError(f"{DEPTH_KEY}: {p.spec.to_string()} is not an evidence depth")
        return cls(p, int(data["seed"]), str(data["base_task"]))


@dataclass
class DepthDocs:
    """Checks one document, moves its evidence (when a move is given), adds the fields."""

    task: str
    fields: protocol.DepthFields
    ids: Sequence[str]
    move: DepthTaskPerturbation | None
    records: list[DepthRecord] = field(default_factory=list)

    def __call__(self, doc: Mapping[str, Any], index: int) -> dict[str, Any]:
        doc_id = self.ids[index]
        protocol.check_doc(self.task, self.fields, doc, doc_id)
        out: dict[str, Any] = {DOC_ID: doc_id}
        if self.move is not None:
            p = self.move.perturbation
            res = p.reorder_passages(
                list(doc[self.fields.passages]), int(doc[self.fields.evidence])
            )
            out[self.fields.passages] = res.passages
            out[self.fields.evidence] = res.evidence
            self.records.append(res.record)
            stats = order_stats(np.asarray(res.order), int(res.order != sorted(res.order)))
            out.update({f"posgen_{k}": v for k, v in stats.to_dict().items()})
            out.update({"posgen_too_short": False, NOMINAL: p.depth, SOURCE: res.record.source})
        canonical = protocol.canonical_fields(self.fields, {**doc, **out})
        out.update({**canonical, K: len(canonical[protocol.PASSAGES])})
        return out


def depth_docs(
    docs: Any,
    task: str,
    fields: protocol.DepthFields,
    move: DepthTaskPerturbation | None,
    split: str = "test",
) -> tuple[Any, DepthDocs]:
    """Checked (and moved) copies of ``docs`` (a ``datasets.Dataset`` or a list of dicts)."""
    handler = DepthDocs(task, fields, stable_ids(docs, split), move)
    if hasattr(docs, "map"):
        body = f"{docs._fingerprint}/{task}/{fields}/{None if move is None else move.to_dict()}"
        new = docs.map(
            handler,
            with_indices=True,
            keep_in_memory=True,
            load_from_cache_file=False,
            new_fingerprint=hashlib.sha256(body.encode()).hexdigest()[:32],
        )
    else:
        new = [{**d, **handler(d, i)} for i, d in enumerate(docs)]
    return new, handler


def summarize(records: Sequence[DepthRecord]) -> dict[str, Any]:
    """The moved documents of one task: how many, and their mean realised depth."""
    n = len(records)
    return {
        "n_docs": n,
        "mean_realised_depth": sum(r.realised for r in records) / n if n else 0.0,
        "n_moved": sum(r.index != r.source for r in records),
    }


class DepthTaskMixin:
    """Mixed in before an lm-eval task class whose config declares the protocol."""

    def __init__(self, *args: Any, config: dict[str, Any] | None = None, **kwargs: Any) -> None:
        config = dict(config or {})
        config.pop("class", None)
        raw = config.pop(DEPTH_KEY, None)
        task = str(config.get("task"))
        fields = protocol.declared_fields(task, config.get("metadata"))
        if fields is None:
            raise protocol.missing_protocol(task)
        self._depth_fields = fields
        self._depth_move = None if raw is None else DepthTaskPerturbation.from_dict(raw)
        self._depth_docs: Any = None
        self._depth_handler: DepthDocs | None = None
        if self._depth_move is not None:
            metadata = config.get("metadata")
            config["metadata"] = {
                **(metadata if isinstance(metadata, dict) else {}),
                "posgen": {**self._depth_move.to_dict(), "fields": fields.to_dict()},
            }
        super().__init__(*args, config=config, **kwargs)  # type: ignore[call-arg]

    @property
    def eval_docs(self) -> Any:
        if self._depth_docs is None:
            base = super().eval_docs  # type: ignore[misc]
            cfg = self.config  # type: ignore[attr-defined]
            split = str(cfg.test_split or cfg.validation_split or "test")
            docs, handler = depth_docs(
                base, str(cfg.task), self._depth_fields, self._depth_move, split
            )
            self._depth_docs, self._depth_handler = docs, handler
            if self._depth_move is not None:
                meta = self.config.metadata  # type: ignore[attr-defined]
                meta.setdefault("posgen", {})["depth_stats"] = summarize(handler.records)
        return self._depth_docs


class DepthTask(DepthTaskMixin, ConfigurableTask):
    """A YAML task with the protocol (``class: !function posgen.tasks.depth_task.DepthTask``)."""


def depth_class(base: type | None) -> type:
    """The protocol counterpart of a task class (None: a plain YAML task); a class that
    already has it is returned as it is."""
    if base is None or base is ConfigurableTask:
        return DepthTask
    if isinstance(base, type) and issubclass(base, DepthTaskMixin):
        return base
    if not (isinstance(base, type) and issubclass(base, ConfigurableTask)):
        raise TypeError(
            f"posgen can only add the depth protocol to a ConfigurableTask, not {base!r}"
        )
    return type(f"Depth{base.__name__}", (DepthTaskMixin, base), {})


def with_protocol_class(config: dict[str, Any]) -> dict[str, Any]:
    """A full task config with :func:`depth_class` as its class when its metadata
    declares the protocol (checked: a malformed declaration is refused); else unchanged."""
    if protocol.declared_fields(str(config.get("task")), config.get("metadata")) is None:
        return config
    return {**config, "class": depth_class(config.get("class"))}
