"""``posgen_recall``: finish a sentence with a word recalled from the passage before it.

The offline suite's generative task (``generate_until``), built from the same prose sources
as ``posgen_cloze`` (:mod:`posgen.tasks.corpora`: the Britannica article and the Python
documentation topics).

Item
    ``question``: a sentence of at least ``QUESTION_WORDS`` words without its final word;
    ``target``: that word, trailing punctuation removed. ``passage``: the shortest run of
    whole sentences ending just before the question's sentence with at least
    ``PASSAGE_WORDS`` words (and at most twice that). The target qualifies as a cloze
    target does (:mod:`posgen.tasks.sentence_items`) and, in addition, occurs as a word of the passage and not in the question, so the
    passage is the only place in the prompt it can be recalled from, and occurs at most
    ``MAX_SOURCE_COUNT`` times in its whole source (case-insensitive), so the topic alone
    does not give it away (in the Python documentation "object", "statement" or
    "exception" finish many sentences).
Selection
    Items whose sentences appear in a ``posgen_prose`` document or a ``posgen_cloze`` item
    are skipped; the rest are taken per source (``QUOTA``) in the order of the SHA-256 of
    their id, skipping any that shares a sentence with an item already chosen, then kept in
    source order.
Prompt and answer (the task's YAML, :data:`posgen.tasks.family.BASE_TASKS`)
    ``"{passage} {question}"``: the question continues the passage as running text; the
    model generates greedily until a newline or a full stop (at most ``MAX_GEN_TOKS``
    tokens); the filter keeps the first word of the generation (regex ``[A-Za-z]+``, first
    match) and ``exact_match`` compares it with the target, ignoring case and punctuation.
Perturbation
    Only ``passage`` is content: the question and the target never move, and word order
    perturbations move whole words, so the target stays in the passage at any rate and
    the answer stays defined; what degrades is the model's use of the passage.
"""

from __future__ import annotations

import hashlib
import re
from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

from posgen.tasks import corpora
from posgen.tasks.sentence_items import pick_disjoint, target_word

QUOTA = {"britannica": 16, "pydoc": 32}
PASSAGE_WORDS = 40
MAX_SOURCE_COUNT = 50
QUESTION_WORDS = 6
MAX_GEN_TOKS = 5
UNTIL = ("\n", ".", ",", ";")


def _words(text: str) -> list[str]:
    """The words of ``text`` with punctuation removed (``"block."`` -> ``"block"``)."""
    return [re.sub(r"\W+", "", w) for w in text.split()]


def recall_item(
    passage: Sequence[str], sentence: str, common: Callable[[str], bool]
) -> tuple[str, str, str] | None:
    """(passage, question, target) from the passage's sentences and the next sentence, or
    None when the sentence's final word does not qualify (see the module docstring);
    ``common(word)`` says whether a word is too common in its source."""
    words = sentence.split(" ")
    target = target_word(words[-1])
    if len(words) < QUESTION_WORDS or target is None or common(target):
        return None
    question, text = " ".join(words[:-1]), " ".join(passage)
    if target not in _words(text) or target in _words(question):
        return None
    return text, question, target


def _passage_start(sentences: Sequence[str], j: int) -> int | None:
    """The first sentence of the shortest run ending at ``j - 1`` with at least
    ``PASSAGE_WORDS`` words (None if there is none or it has more than twice that)."""
    n, a = 0, j
    while a > 0 and n < PASSAGE_WORDS:
        a -= 1
        n += len(sentences[a].split())
    return a if PASSAGE_WORDS <= n <= 2 * PASSAGE_WORDS else None


def _is_used(sentence: str, used: str) -> bool:
    """Whether a sentence appears in ``used`` (a cloze item's last sentence lacks its final
    punctuation there, so the sentence without its last word is looked for too)."""
    return sentence in used or sentence.rsplit(" ", 1)[0] in used


def _candidates(source: str, used: str) -> list[tuple]:
    """(rank, (stream, first, last sentence), doc_id, origin, item) of every candidate."""
    out = []
    streams = corpora.sentence_streams(source)
    counts = Counter(w.lower() for _, sents in streams for s in sents for w in _words(s))

    def common(word: str) -> bool:
        return counts[word.lower()] > MAX_SOURCE_COUNT

    for s_i, (origin, sents) in enumerate(streams):
        for j in range(1, len(sents)):
            a = _passage_start(sents, j)
            if a is None or any(_is_used(s, used) for s in sents[a : j + 1]):
                continue
            item = recall_item(sents[a:j], sents[j], common)
            if item is not None:
                doc_id = f"recall-{source}-{s_i:02d}-{j:04d}"
                rank = hashlib.sha256(f"posgen_recall/{doc_id}".encode()).hexdigest()
                out.append((rank, (s_i, a, j), doc_id, origin, item))
    return out


def build_recall(used: Sequence[str], quota: dict[str, int] | None = None) -> list[dict[str, Any]]:
    """The ``posgen_recall`` items (see the module docstring); ``used`` are the texts of
    the suite's other tasks (their sentences are skipped)."""
    used_text = "\n".join(used)
    rows = []
    for source, k in (quota or QUOTA).items():
        picked = pick_disjoint(_candidates(source, used_text), k, f"{source} recall")
        for _, _, doc_id, origin, (passage, question, target) in picked:
            rows.append(
                {
                    "doc_id": doc_id,
                    "source": source,
                    "origin": origin,
                    "passage": passage,
                    "question": question,
                    "target": target,
                }
            )
    return rows
