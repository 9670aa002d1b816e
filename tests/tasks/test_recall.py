"""``posgen_recall``'s items: built as documented from the shipped data (unit tier)."""

from __future__ import annotations

import re
from collections import Counter

from posgen.tasks import corpora, offline, recall
from posgen.tasks.sentence_items import STOP_WORDS, target_word


def _words(text: str) -> set[str]:
    return {re.sub(r"\W+", "", w) for w in text.split()}


def test_items_follow_their_construction() -> None:
    rows = offline.load_rows("posgen_recall.jsonl")
    assert len(rows) == sum(recall.QUOTA.values()) == 48
    assert Counter(r["source"] for r in rows) == recall.QUOTA
    assert len({r["doc_id"] for r in rows}) == len(rows)
    for r in rows:
        n = len(r["passage"].split())
        assert recall.PASSAGE_WORDS <= n <= 2 * recall.PASSAGE_WORDS, r["doc_id"]
        assert len(r["question"].split()) + 1 >= recall.QUESTION_WORDS
        assert target_word(r["target"]) == r["target"]
        assert r["target"] in _words(r["passage"])  # recallable from the passage ...
        assert r["target"] not in _words(r["question"])  # ... and only from there


def test_items_share_no_sentence_with_the_other_tasks() -> None:
    other = [r["text"] for r in offline.load_rows("posgen_prose.jsonl")]
    other += [r["context"] for r in offline.load_rows("posgen_cloze.jsonl")]
    joined = "\n".join(other)
    for r in offline.load_rows("posgen_recall.jsonl"):
        for sentence in corpora.split_sentences(f"{r['passage']} {r['question']}"):
            assert sentence.rsplit(" ", 1)[0] not in joined, r["doc_id"]


def test_a_target_qualifies_only_where_the_passage_alone_gives_it() -> None:
    passage = ["The gild of St Anne went through a register at Knowle for seventy years."]
    rare = lambda word: False  # noqa: E731
    assert recall.recall_item(passage, "The book was known as the register.", rare) == (
        passage[0],
        "The book was known as the",
        "register",
    )
    for sentence in (
        "A register is kept, and this is the register.",  # the target is in the question
        "It is the register.",  # too short a question
        "It is said that they once went through.",  # a stop word
        "It is said that they once went to Stratford.",  # not in the passage
        "It is said that the gild kept no GILD.",  # not a word (capitals)
    ):
        assert recall.recall_item(passage, sentence, rare) is None, sentence
    assert recall.recall_item(passage, "The book was known as the register.", bool) is None
    assert target_word("1582,") is None and target_word("HTML.") is None
    assert "through" in STOP_WORDS and target_word("register.)") == "register"


def test_loader_gives_an_lm_eval_dataset() -> None:
    ds = offline.recall_dataset(version=2, anything="ignored")
    assert list(ds) == ["test"] and len(ds["test"]) == 48
    assert set(ds["test"].column_names) >= {"doc_id", "passage", "question", "target"}
    assert offline.GENERATIVE_TASKS == ("posgen_recall",)
    assert offline.TASKS == offline.SUITE_TASKS_WITH_GENERATION
    assert set(offline.SUITE_TASKS) <= set(offline.TASKS)
