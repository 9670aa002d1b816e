"""The built-in evidence-depth tasks: their documents at a chosen length, and the
variants that name a length.

Four tasks over two shipped item sets (:mod:`posgen.tasks.kv`,
:mod:`posgen.tasks.passage_qa`), in the group ``posgen_depth``; each declares the field
protocol (``passages``, ``evidence``, ``question``; :mod:`posgen.tasks.depth_protocol`)::

    posgen_kv          the gold value's log-likelihood after ``key:`` (acc, perplexity)
    posgen_kv_mc       the gold value among CHOICES values of the same document (acc)
    posgen_kv_gen      the first generated word (exact_match)
    posgen_passage_qa  the next word of a sentence of the evidence passage (acc, perplexity)

Context length is the second axis: a document holds ``posgen_n_passages`` passages (kv:
pairs) from its item's pool, a task config's metadata key that lm-eval hands to the
dataset function (``--metadata '{"posgen_n_passages": 60}'`` sets it for a run). The
variant ``<task>_n<N>`` (``posgen_kv_n120``) is the task at N passages, resolved by name
(:func:`parse_variant`), so ``perm_depth_50pct_posgen_kv_n120`` moves its evidence too.
:mod:`posgen.tasks.depth_lengths` maps a length in tokens (or a fraction of a model's
context) to N with the model's tokenizer.
"""

from __future__ import annotations

import re
from functools import cache
from typing import Any

from posgen.tasks import kv, offline, passage_qa
from posgen.tasks.depth_protocol import DepthTaskError

VERSION = 1
GROUP = "posgen_depth"
KV_FILE = offline.DEPTH_FILES["kv"]
QA_FILE = offline.DEPTH_FILES["passage_qa"]
POOL_FILE = offline.DEPTH_FILES["passage_pool"]
N_KEY = "posgen_n_passages"
PROTOCOL = {"passages": "passages", "evidence": "evidence", "question": "question"}
KV_TASKS = ("posgen_kv", "posgen_kv_mc", "posgen_kv_gen")
TASKS = (*KV_TASKS, "posgen_passage_qa")
# one gold log-likelihood request per document: the decomposition's account runs on these
LOGLIKELIHOOD_TASKS = ("posgen_kv", "posgen_passage_qa")
# passages per document by default, the most an item's pool holds, and how passages join
DEFAULT_PASSAGES = {
    **dict.fromkeys(KV_TASKS, kv.PASSAGES),
    "posgen_passage_qa": passage_qa.PASSAGES,
}
MAX_PASSAGES = {**dict.fromkeys(KV_TASKS, kv.POOL + 1), "posgen_passage_qa": passage_qa.POOL + 1}
SEPARATOR = {**dict.fromkeys(KV_TASKS, "\n"), "posgen_passage_qa": "\n\n"}
QUESTION_SEPARATOR = "\n\n"
_VARIANT = re.compile(r"^(?P<task>.+)_n(?P<n>\d+)$")


def doc_to_text(task: str) -> str:
    """The task's prompt template: the passages, a blank line, the question."""
    sep = SEPARATOR[task]
    return f"{{{{passages|join({sep!r})}}}}{QUESTION_SEPARATOR}{{{{question}}}}"


def render_context(task: str, doc: dict[str, Any]) -> str:
    """What :func:`doc_to_text` renders for ``doc`` (the same string: tested)."""
    return SEPARATOR[task].join(doc["passages"]) + QUESTION_SEPARATOR + doc["question"]


def check_n(task: str, n: Any) -> int:
    """``n`` passages for ``task``, refused (one line, the range) outside 2..its pool."""
    return kv.check_passages(task, n, MAX_PASSAGES[task] - 1)


@cache
def _kv_rows() -> tuple[dict[str, Any], ...]:
    return tuple(offline.load_rows(KV_FILE))


@cache
def _qa_rows() -> tuple[tuple[dict[str, Any], ...], dict[str, str]]:
    pool = {r["id"]: r["text"] for r in offline.load_rows(POOL_FILE)}
    return tuple(offline.load_rows(QA_FILE)), pool


def documents(task: str, n: int | None = None) -> list[dict[str, Any]]:
    """The documents of a built-in depth task at ``n`` passages (default: the task's)."""
    n = check_n(task, DEFAULT_PASSAGES[task] if n is None else n)
    if task in KV_TASKS:
        return [kv.kv_document(row, n) for row in _kv_rows()]
    rows, pool = _qa_rows()
    return [passage_qa.passage_document(row, pool, n) for row in rows]


def _dataset(task: str, metadata: dict[str, Any]) -> Any:
    import datasets

    docs = documents(task, metadata.get(N_KEY))
    return datasets.DatasetDict({"test": datasets.Dataset.from_list(docs)})


def kv_dataset(**metadata: Any) -> Any:
    """lm-eval ``custom_dataset`` of the key-value tasks (reads ``posgen_n_passages``)."""
    return _dataset("posgen_kv", metadata)


def passage_qa_dataset(**metadata: Any) -> Any:
    """lm-eval ``custom_dataset`` of ``posgen_passage_qa`` (reads ``posgen_n_passages``)."""
    return _dataset("posgen_passage_qa", metadata)


def variant_name(task: str, n: int) -> str:
    """``variant_name("posgen_kv", 120) == "posgen_kv_n120"`` (checked)."""
    if task not in TASKS:
        raise DepthTaskError(f"{task!r} is not a built-in depth task ({', '.join(TASKS)})")
    return f"{task}_n{check_n(task, n)}"


def parse_variant(name: str) -> tuple[str, int] | None:
    """``(task, n)`` of a variant name; None when ``name`` is not one (a task of the
    form ``<built-in depth task>_n<digits>``); :class:`DepthTaskError` when its n is
    outside the task's range."""
    m = _VARIANT.match(name)
    if m is None or m.group("task") not in TASKS:
        return None
    return m.group("task"), check_n(m.group("task"), int(m.group("n")))


def variant_config(base: dict[str, Any], name: str, n: int) -> dict[str, Any]:
    """A built-in depth task's config at n passages, named ``name``."""
    return {**base, "task": name, "metadata": {**base.get("metadata", {}), N_KEY: n}}
