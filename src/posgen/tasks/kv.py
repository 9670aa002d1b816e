"""``posgen_kv``: key-value retrieval, the evidence-depth task of Liu et al. (2024) in words.

Item (``posgen_kv.jsonl``, built by :func:`build_kv`)
    ``ITEMS`` items. Each draws ``2 · (POOL + 1)`` distinct words from the vocabulary of
    the shipped Britannica article (lower-case words of 4 to 9 letters that occur at least
    ``MIN_COUNT`` times, stop words excluded), in the order of one uniform number per word
    from the item's own stream (:func:`posgen.perturbations.seeding.item_rng`, keyed by the
    item id): the first pair is the evidence ``key: value``, the next ``POOL`` pairs the
    distractor pool, and one more uniform ``u`` places the evidence. No word is both a
    key and a value in an item, so the gold value occurs once, on the evidence line.
Document at N pairs (:func:`kv_document`; N = ``posgen_n_passages``, default ``PASSAGES``)
    the evidence and the first N − 1 distractors, one ``key: value`` per line, the
    evidence at index ``min(⌊u·N⌋, N − 1)`` (its own depth, seeded; the same u at every
    N), then the question ``key:`` after a blank line::

        castle: honour
        ...
        vessel: quarrel

        castle:

    ``target`` is the value. ``choices`` (the ``posgen_kv_mc`` task) are the target and
    ``CHOICES − 1`` values of other pairs of the same document, drawn from the stream of
    (item, N), the target at a drawn index ``gold``. ``PASSAGES = 33`` puts the five
    default depths on exact slots (k − 1 = 32) at about 170 SmolLM2 tokens, the format
    the shared measurement of the embedded model used (30 pairs, ~150 tokens).
Tasks (:mod:`posgen.tasks.depth_suite`)
    ``posgen_kv`` (the gold value's log-likelihood: ``acc``, greedy, and ``perplexity``),
    ``posgen_kv_mc`` (``acc`` over the ``CHOICES`` values) and ``posgen_kv_gen`` (the first
    generated word's ``exact_match``); the same documents in each.
"""

from __future__ import annotations

import re
from collections import Counter
from typing import Any

import numpy as np

from posgen.perturbations.seeding import item_rng
from posgen.tasks.depth_protocol import DepthTaskError
from posgen.tasks.sentence_items import STOP_WORDS

VERSION = 1
ITEMS = 24
POOL = 511  # distractor pairs per item: documents of up to 512 pairs (~2.7k SmolLM2 tokens)
PASSAGES = 33  # pairs per document by default
CHOICES = 4
MAX_GEN_TOKS = 8  # the longest value is at most 4 SmolLM2 tokens
MIN_COUNT = 2
MIN_PASSAGES = 2
_WORD = re.compile(r"(?<![\w'-])[a-z]{4,9}(?![\w'-])")


def vocabulary(text: str) -> list[str]:
    """The words keys and values are drawn from, sorted (see the module docstring)."""
    counts = Counter(_WORD.findall(text))
    return sorted(w for w, c in counts.items() if c >= MIN_COUNT and w not in STOP_WORDS)


def build_kv(text: str, items: int = ITEMS) -> list[dict[str, Any]]:
    """The ``posgen_kv`` items drawn from ``text`` (the cleaned Britannica article)."""
    vocab = vocabulary(text)
    need = 2 * (POOL + 1)
    if len(vocab) < need:
        raise ValueError(f"the vocabulary has {len(vocab)} words; an item needs {need}")
    rows = []
    for i in range(items):
        doc_id = f"kv-{i:03d}"
        rng = item_rng(0, f"posgen_kv/v{VERSION}", doc_id)
        order = np.argsort(rng.random(len(vocab)), kind="stable")[:need]
        words = [vocab[j] for j in order]
        keys, values = words[0::2], words[1::2]
        rows.append(
            {
                "doc_id": doc_id,
                "key": keys[0],
                "value": values[0],
                "distractors": [[k, v] for k, v in zip(keys[1:], values[1:], strict=True)],
                "u": float(rng.random()),
            }
        )
    return rows


def check_passages(task: str, n: Any, pool: int) -> int:
    """``n`` as the passages of a document (at least 2, at most the pool plus the
    evidence); :class:`DepthTaskError` saying the range otherwise."""
    if (
        isinstance(n, bool)
        or not isinstance(n, (int, np.integer))
        or not (MIN_PASSAGES <= n <= pool + 1)
    ):
        raise DepthTaskError(
            f"{task}: posgen_n_passages must be an integer from {MIN_PASSAGES} to "
            f"{pool + 1} (the shipped items hold {pool} distractors each), got {n!r}"
        )
    return int(n)


def evidence_index(u: float, n: int) -> int:
    """The evidence's own index among n passages: ``min(⌊u·n⌋, n − 1)``."""
    return min(int(u * n), n - 1)


def kv_document(row: dict[str, Any], n: int) -> dict[str, Any]:
    """The document of one item at n pairs (the module docstring)."""
    pairs = row["distractors"][: n - 1]
    e = evidence_index(row["u"], n)
    lines = [f"{k}: {v}" for k, v in pairs]
    lines.insert(e, f"{row['key']}: {row['value']}")
    rng = item_rng(0, f"posgen_kv_mc/v{VERSION}/n{n}", row["doc_id"])
    picks = np.argsort(rng.random(len(pairs)), kind="stable")[: CHOICES - 1]
    foils = [pairs[j][1] for j in picks]
    gold = int(rng.random() * (len(foils) + 1))
    return {
        "doc_id": row["doc_id"],
        "passages": lines,
        "evidence": e,
        "question": f"{row['key']}:",
        "target": row["value"],
        "choices": [*foils[:gold], row["value"], *foils[gold:]],
        "gold": gold,
        "n_passages": n,
    }
