"""An lm-eval task whose evaluation docs have their content fields perturbed.

:class:`PerturbedTask` is an lm-eval ``ConfigurableTask`` built from the base task's own
config plus one extra key, ``posgen_perturbation`` (a :class:`TaskPerturbation` as a
dict), which it pops before lm-eval sees the config. Data flow::

    base dataset -> base process_docs -> perturb content fields -> prompt template

The base task's ``process_docs`` runs unchanged (the perturbation wraps the evaluation
docs it returns). Few-shot examples come from the base docs, unperturbed, unless
``perturb_fewshot`` is set; the few-shot sampler still excludes the eval doc itself.
Each doc gains ``posgen_doc_id`` (a stable source id) and its order statistics
(``posgen_n`` (words that could move), ``posgen_fraction_moved``, ``posgen_mean_displacement``,
``posgen_dnd``, ``posgen_idc``, ``posgen_too_short``); the task config's metadata
gains ``posgen`` (spec, seed, base task, fields, and doc-averaged order statistics).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from lm_eval.api.task import ConfigurableTask

from posgen.compat import wrapped_method
from posgen.perturbations import registry
from posgen.perturbations.order_stats import OrderStats, combine_stats
from posgen.perturbations.text import TextPerturbation
from posgen.tasks.doc_ids import DOC_ID, stable_ids
from posgen.tasks.field_spec import FieldSpec

POSGEN_KEY = "posgen_perturbation"
STAT_COLUMNS = ("n", "fraction_moved", "mean_displacement", "dnd", "idc")


@dataclass(frozen=True)
class TaskPerturbation:
    """What a perturbed task does: a text perturbation, a seed, which fields."""

    perturbation: TextPerturbation
    seed: int
    base_task: str
    fields: tuple[FieldSpec, ...]
    perturb_fewshot: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "spec": self.perturbation.spec.to_dict(),
            "seed": self.seed,
            "base_task": self.base_task,
            "perturb_fewshot": self.perturb_fewshot,
            "fields": [f.to_dict() for f in self.fields],
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> TaskPerturbation:
        p = registry.from_spec(data["spec"])
        if not isinstance(p, TextPerturbation):
            raise TypeError(f"{POSGEN_KEY}: {p.spec.to_string()} is not a text perturbation")
        return cls(
            p,
            int(data["seed"]),
            str(data["base_task"]),
            tuple(FieldSpec(**f) for f in data["fields"]),
            bool(data.get("perturb_fewshot", False)),
        )


@dataclass
class DocPerturber:
    """Perturbs the content fields of one doc; collects per-doc statistics."""

    tp: TaskPerturbation
    ids: Sequence[str]
    stats: list[OrderStats] = field(default_factory=list)
    too_short: int = 0

    def __call__(self, doc: Mapping[str, Any], index: int) -> dict[str, Any]:
        doc_id = self.ids[index]
        out: dict[str, Any] = {DOC_ID: doc_id}
        parts, short = [], True
        for spec in self.tp.fields:
            value = doc.get(spec.name) if isinstance(doc, Mapping) else None
            if not isinstance(value, str):
                raise KeyError(
                    f"{self.tp.base_task}: doc {doc_id} has no text field {spec.name!r}; "
                    f"its fields are {sorted(doc)}. Choose content fields with "
                    "--metadata '{\"posgen_fields\": [...]}'"
                )
            head, body, tail = spec.split(value)
            key = f"{self.tp.base_task}\x00{doc_id}\x00{spec.name}"
            res = self.tp.perturbation.apply(
                body, self.tp.seed, key=key.encode("utf-8"), keep_last=spec.keep_last
            )
            out[spec.name] = head + res.text + tail
            parts.append(res.stats)
            short = short and res.too_short
        stats = combine_stats(parts)
        self.stats.append(stats)
        self.too_short += short
        out.update({f"posgen_{k}": getattr(stats, k) for k in STAT_COLUMNS})
        out["posgen_too_short"] = short
        return out


def perturb_docs(docs: Any, tp: TaskPerturbation, split: str) -> tuple[Any, DocPerturber]:
    """Perturbed copies of ``docs`` (a ``datasets.Dataset`` or a list of dicts)."""
    perturber = DocPerturber(tp, stable_ids(docs, split))
    if hasattr(docs, "map"):
        digest = hashlib.sha256(f"{docs._fingerprint}/{tp.to_dict()}".encode()).hexdigest()
        new = docs.map(
            perturber,
            with_indices=True,
            keep_in_memory=True,
            load_from_cache_file=False,
            new_fingerprint=digest[:32],
        )
    else:
        new = [{**d, **perturber(d, i)} for i, d in enumerate(docs)]
    return new, perturber


def summarize(perturber: DocPerturber) -> dict[str, Any]:
    """Doc-averaged order statistics of one split."""
    n = len(perturber.stats)
    mean = {
        k: (sum(getattr(s, k) for s in perturber.stats) / n if n else 0.0) for k in STAT_COLUMNS
    }
    return {
        "n_docs": n,
        "n_too_short": perturber.too_short,
        **{f"mean_{k}": v for k, v in mean.items()},
    }


class PerturbedTaskMixin:
    """Mixed in before an lm-eval task class: perturbs its evaluation docs."""

    def __init__(self, *args: Any, config: dict[str, Any] | None = None, **kwargs: Any) -> None:
        config = dict(config or {})
        if POSGEN_KEY not in config:
            raise ValueError(f"a perturbed task needs the {POSGEN_KEY!r} config key")
        self._posgen = TaskPerturbation.from_dict(config.pop(POSGEN_KEY))
        config.pop("class", None)
        self._posgen_docs: Any = None
        self._posgen_originals: dict[str, Any] = {}
        metadata = config.get("metadata")
        config["metadata"] = {
            **(metadata if isinstance(metadata, dict) else {}),
            "posgen": self._posgen.to_dict(),
        }
        super().__init__(*args, config=config, **kwargs)  # type: ignore[call-arg]
        # a Python task may build its own config (SQuAD2 ignores the one given): keep ours
        own = self.config  # type: ignore[attr-defined]
        own.metadata = {**config["metadata"], **self._metadata()}
        self._wrap_sampler()

    def _metadata(self) -> dict[str, Any]:
        """The task config's metadata, with the ``posgen`` record in it."""
        cfg = self.config  # type: ignore[attr-defined]
        if not isinstance(cfg.metadata, dict):
            cfg.metadata = {}
        cfg.metadata.setdefault("posgen", self._posgen.to_dict())
        return cfg.metadata

    def _eval_split(self) -> str:
        """The evaluation split's name (a Python task may leave the config's unset)."""
        cfg = self.config  # type: ignore[attr-defined]
        for split in (cfg.test_split, cfg.validation_split):
            if split is not None:
                return str(split)
        return "test" if self.has_test_docs() else "validation"  # type: ignore[attr-defined]

    @property
    def eval_docs(self) -> Any:
        if self._posgen_docs is None:
            base = super().eval_docs  # type: ignore[misc]
            docs, perturber = perturb_docs(base, self._posgen, self._eval_split())
            self._posgen_originals = dict(zip(perturber.ids, base, strict=True))
            self._posgen_docs = docs
            self._metadata()["posgen"]["order_stats"] = summarize(perturber)
        return self._posgen_docs

    def fewshot_docs(self) -> Any:
        docs = super().fewshot_docs()  # type: ignore[misc]
        if docs is None or not self._posgen.perturb_fewshot:
            return docs
        return perturb_docs(docs, self._posgen, "fewshot")[0]

    def _wrap_sampler(self) -> None:
        """Let the sampler exclude the eval doc by its unperturbed original, as the base
        task does (otherwise a perturbed doc never equals its own few-shot copy)."""
        exclude_originals(self, lambda: self._posgen_originals)


def exclude_originals(task: Any, originals: Callable[[], Mapping[str, Any]]) -> None:
    """Let ``task``'s few-shot sampler exclude an eval doc by its original (looked up by
    ``posgen_doc_id`` in ``originals()``), as the base task excludes the doc itself: a doc
    posgen changed or added fields to never equals its own few-shot copy."""
    sampler = getattr(task, "sampler", None)
    if sampler is None:
        return

    def excluding_originals(inner: Any) -> Any:
        def sample(n: int, eval_doc: Any = None, df: Any = None, **kw: Any) -> Any:
            if isinstance(eval_doc, Mapping) and DOC_ID in eval_doc:
                eval_doc = originals().get(eval_doc[DOC_ID], eval_doc)
            return inner(n, eval_doc=eval_doc, df=df, **kw)

        return sample

    # the sampler is this task's own: wrapped for the task's lifetime, nothing to undo
    wrapped_method(sampler, "sample", excluding_originals)


class PerturbedTask(PerturbedTaskMixin, ConfigurableTask):
    """A perturbed YAML task (``class: !function posgen.tasks.perturbed_task.PerturbedTask``)."""


def perturbed_class(base: type | None) -> type:
    """The perturbed counterpart of a task class (None: a plain YAML task)."""
    if base is None or base is ConfigurableTask:
        return PerturbedTask
    if not (isinstance(base, type) and issubclass(base, ConfigurableTask)):
        raise TypeError(f"posgen can only perturb ConfigurableTask-based tasks, not {base!r}")
    return type(f"Perturbed{base.__name__}", (PerturbedTaskMixin, base), {})
