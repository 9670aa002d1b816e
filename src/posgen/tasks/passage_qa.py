"""``posgen_passage_qa``: find the next word of a sentence in one passage among distractors.

Built from the prose sources of :mod:`posgen.tasks.corpora` (the Britannica article and
the Python documentation topics), for the evidence-depth sweep (docs/depth.md).

Passages
    Runs of whole sentences of one stream (the article, or one documentation topic): the
    sentences in order, a passage closed as soon as it holds ``PASSAGE_WORDS`` words and
    kept when it holds at most ``MAX_WORDS``. A sentence of a ``posgen_prose`` document,
    a ``posgen_cloze`` or a ``posgen_recall`` item breaks the run and is never used, so
    no passage shares a sentence with the other tasks.
Item
    Only readable passages are kept (:func:`is_clean`: no OCR debris).
    The evidence is a passage holding a sentence whose word at index j ≥ ``QUESTION_WORDS``
    qualifies as a target (:func:`posgen.tasks.sentence_items.target_word`), occurs at
    most ``MAX_SOURCE_COUNT`` times in its source and not among the j words before it;
    the question is those j words (the start of the sentence), the target that word. Of a
    passage's candidates the one first in SHA-256 order of its place is taken; evidence
    passages are taken per source (``QUOTA``) in the SHA-256 order of their id.
    Distractors: passages of the same source from a pool of ``POOL_PER_SOURCE`` (the first
    in SHA-256 order among those that share no sentence with any item's evidence, one of
    each text: the documentation repeats some paragraphs under several topics), without the target as a word
    (any case) and without the question; each item keeps ``POOL`` of them in the SHA-256
    order of (item, passage), so the target is in the evidence and nowhere else in the
    document. One uniform ``u`` from the item's stream places the evidence.
Document at k passages (``posgen_n_passages``, default ``PASSAGES``)
    the evidence and the item's first k − 1 distractors, the evidence at index
    ``min(⌊u·k⌋, k − 1)``, passages separated by blank lines, then the question after a
    blank line; the target (with its leading space) is scored by log-likelihood (``acc``,
    greedy, and ``perplexity``). ``PASSAGES = 9`` puts the five default depths on exact
    slots (k − 1 = 8).
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Sequence
from typing import Any

from posgen.perturbations.seeding import item_rng
from posgen.tasks import corpora
from posgen.tasks.recall import MAX_SOURCE_COUNT
from posgen.tasks.sentence_items import target_word

VERSION = 1
QUOTA = {"britannica": 12, "pydoc": 12}
PASSAGE_WORDS = 30
MAX_WORDS = 50
QUESTION_WORDS = 6
PASSAGES = 9
POOL = 47  # distractors per item: documents of up to 48 passages (~2.5k SmolLM2 tokens)
POOL_PER_SOURCE = 120
PLAIN_SHARE = 0.85


def _rank(text: str) -> str:
    return hashlib.sha256(f"posgen_passage_qa/v{VERSION}/{text}".encode()).hexdigest()


def _words(text: str) -> list[str]:
    return [re.sub(r"\W+", "", w).lower() for w in text.split()]


_PLAIN = re.compile(r"^[(\"'*]*[A-Za-z]+(?:['-][A-Za-z]+)*[)\"'*.,;:!?]*$")
_MIXED = re.compile(r"[A-Za-z][^A-Za-z\s]*\d|\d[^A-Za-z\s]*[A-Za-z]")


def is_clean(text: str) -> bool:
    """Readable prose: at least ``PLAIN_SHARE`` of the words plain words (letters, inner
    hyphens or apostrophes, punctuation around them), none mixing letters and digits
    (the article's OCR of engraving captions, ``u1<01zsHOUT``)."""
    words = text.split()
    plain = sum(bool(_PLAIN.match(w)) for w in words)
    return plain >= PLAIN_SHARE * len(words) and not any(_MIXED.search(w) for w in words)


def _is_used(sentence: str, used: str) -> bool:
    return sentence in used or sentence.rsplit(" ", 1)[0] in used


def passages_of(source: str, used: str) -> list[dict[str, Any]]:
    """Every passage of a source, in source order: ``{"id", "origin", "sentences"}``."""
    out = []
    for s_i, (origin, sents) in enumerate(corpora.sentence_streams(source)):
        cur: list[int] = []
        for j, sentence in enumerate(sents):
            if _is_used(sentence, used):
                cur = []
                continue
            cur.append(j)
            n = sum(len(sents[t].split()) for t in cur)
            if n >= PASSAGE_WORDS:
                if n <= MAX_WORDS and is_clean(" ".join(sents[t] for t in cur)):
                    sentences = [sents[t] for t in cur]
                    out.append(
                        {
                            "id": f"{source}-{s_i:02d}-{cur[0]:04d}",
                            "origin": origin,
                            "sentences": sentences,
                        }
                    )
                cur = []
    return out


def question_of(sentences: Sequence[str], common: Any) -> tuple[str, str] | None:
    """(question, target) of a passage, or None when no sentence has a qualifying word."""
    cands = []
    for sentence in sentences:
        words = sentence.split(" ")
        for j in range(QUESTION_WORDS, len(words)):
            target = target_word(words[j])
            if target is None or common(target) or target.lower() in _words(" ".join(words[:j])):
                continue
            cands.append((_rank(f"{sentence}/{j}"), " ".join(words[:j]), target))
            break  # the first qualifying word of each sentence
    return min(cands)[1:] if cands else None


def _common(source: str) -> Any:
    counts = Counter(
        w for _, sents in corpora.sentence_streams(source) for s in sents for w in _words(s)
    )
    return lambda word: counts[word.lower()] > MAX_SOURCE_COUNT


def _evidence(source: str, passages: list[dict[str, Any]], k: int) -> list[tuple]:
    """(passage, question, target) of the first ``k`` passages with a question, in the
    SHA-256 order of their ids."""
    common = _common(source)
    evidence = []
    for p in sorted(passages, key=lambda p: _rank(p["id"])):
        if len(evidence) == k:
            break
        qa = question_of(p["sentences"], common)
        if qa is not None:
            evidence.append((p, *qa))
    if len(evidence) < k:
        raise ValueError(f"{source} passage qa: only {len(evidence)} items, need {k}")
    return evidence


def _shared_pool(passages: list[dict[str, Any]], evidence: list[tuple]) -> list[dict[str, Any]]:
    """The source's distractor pool: the documentation repeats some paragraphs under
    several topics, so a distractor shares no sentence with any evidence passage, and no
    two have one text."""
    taken = {t for p, _, _ in evidence for t in p["sentences"]}
    shared, seen = [], set()
    for p in sorted(passages, key=lambda p: _rank(p["id"])):
        text = " ".join(p["sentences"])
        if text not in seen and not taken & set(p["sentences"]):
            shared.append(p)
            seen.add(text)
    return shared[:POOL_PER_SOURCE]


def _item(source: str, evidence: tuple, shared: list[dict[str, Any]]) -> tuple[dict, list]:
    """One item and the distractors it keeps."""
    p, question, target = evidence
    doc_id = f"pqa-{p['id']}"
    fits = [
        d
        for d in shared
        if target.lower() not in _words(" ".join(d["sentences"]))
        and question not in " ".join(d["sentences"])
    ]
    if len(fits) < POOL:
        raise ValueError(f"{doc_id}: only {len(fits)} distractors, need {POOL}")
    chosen = sorted(fits, key=lambda d: _rank(f"{doc_id}/{d['id']}"))[:POOL]
    item = {
        "doc_id": doc_id,
        "source": source,
        "origin": p["origin"],
        "evidence": " ".join(p["sentences"]),
        "question": question,
        "target": target,
        "distractors": [d["id"] for d in chosen],
        "u": float(item_rng(0, f"posgen_passage_qa/v{VERSION}", doc_id).random()),
    }
    return item, chosen


def build_passage_qa(
    used: Sequence[str], quota: dict[str, int] | None = None
) -> tuple[list[dict[str, Any]], list[dict[str, Any]]]:
    """The items and the distractor pool (``{"id", "source", "origin", "text"}``) of
    ``posgen_passage_qa``; ``used`` are the texts of the suite's other tasks."""
    used_text = "\n".join(used)
    items, pool = [], {}
    for source, k in (quota or QUOTA).items():
        passages = passages_of(source, used_text)
        evidence = _evidence(source, passages, k)
        shared = _shared_pool(passages, evidence)
        for ev in sorted(evidence, key=lambda e: e[0]["id"]):
            item, chosen = _item(source, ev, shared)
            items.append(item)
            for d in chosen:
                text = " ".join(d["sentences"])
                pool[d["id"]] = {
                    "id": d["id"],
                    "source": source,
                    "origin": d["origin"],
                    "text": text,
                }
    return items, [pool[i] for i in sorted(pool)]


def passage_document(row: dict[str, Any], pool: dict[str, str], k: int) -> dict[str, Any]:
    """The document of one item at k passages (the module docstring)."""
    passages = [pool[i] for i in row["distractors"][: k - 1]]
    e = min(int(row["u"] * k), k - 1)
    passages.insert(e, row["evidence"])
    return {
        "doc_id": row["doc_id"],
        "passages": passages,
        "evidence": e,
        "question": row["question"],
        "target": row["target"],
        "n_passages": k,
    }
