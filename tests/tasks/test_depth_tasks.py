"""The built-in evidence-depth tasks: their data's construction, their lm-eval tasks, the
length variants and the mapping from tokens to passages (unit and integration tiers)."""

from __future__ import annotations

import re

import pytest

from posgen.tasks import corpora, depth_lengths, depth_suite, kv, offline, passage_qa
from posgen.tasks.depth_protocol import DepthTaskError
from posgen.tasks.sentence_items import target_word


def words(text: str) -> set[str]:
    return {re.sub(r"\W+", "", w).lower() for w in text.split()}


def test_kv_items_follow_their_construction() -> None:
    rows = offline.load_rows(depth_suite.KV_FILE)
    assert len(rows) == kv.ITEMS and len({r["doc_id"] for r in rows}) == kv.ITEMS
    vocab = set(kv.vocabulary(offline.probe_britannica()))
    for row in rows:
        keys = [row["key"]] + [k for k, _ in row["distractors"]]
        values = [row["value"]] + [v for _, v in row["distractors"]]
        assert len(row["distractors"]) == kv.POOL and 0 <= row["u"] < 1
        assert len(set(keys + values)) == 2 * (kv.POOL + 1)  # all distinct: no key a value
        assert set(keys + values) <= vocab


@pytest.mark.parametrize("n", [2, 4, kv.PASSAGES, 100, kv.POOL + 1])
def test_kv_documents_hold_the_gold_value_once_on_the_evidence_line(n) -> None:
    for doc in depth_suite.documents("posgen_kv", n):
        lines, e = doc["passages"], doc["evidence"]
        assert len(lines) == n == doc["n_passages"] and 0 <= e < n
        key = doc["question"].removesuffix(":")
        assert lines[e] == f"{key}: {doc['target']}"
        text = depth_suite.render_context("posgen_kv", doc)
        assert text.count(f" {doc['target']}\n") == 1 and text.endswith(f"\n\n{key}:")
        assert doc["choices"][doc["gold"]] == doc["target"]
        others = {line.split(": ")[1] for i, line in enumerate(lines) if i != e}
        assert len(doc["choices"]) == min(kv.CHOICES, n) and len(set(doc["choices"])) == len(
            doc["choices"]
        )
        assert set(doc["choices"]) - {doc["target"]} <= others  # foils from the same list


def test_the_evidence_keeps_its_relative_place_across_lengths() -> None:
    row = offline.load_rows(depth_suite.KV_FILE)[0]
    for n in (10, 33, 200):
        doc = depth_suite.documents("posgen_kv", n)[0]
        assert doc["evidence"] == min(int(row["u"] * n), n - 1)
        assert doc["passages"][: doc["evidence"]] == [
            f"{k}: {v}" for k, v in row["distractors"][: doc["evidence"]]
        ]


def test_passage_qa_items_follow_their_construction() -> None:
    items = offline.load_rows(depth_suite.QA_FILE)
    pool = {r["id"]: r["text"] for r in offline.load_rows(depth_suite.POOL_FILE)}
    assert len(items) == sum(passage_qa.QUOTA.values())
    used = [r["text"] for r in offline.load_rows("posgen_prose.jsonl")]
    used += [r["context"] for r in offline.load_rows("posgen_cloze.jsonl")]
    used += [r["passage"] for r in offline.load_rows("posgen_recall.jsonl")]
    evidence = {r["evidence"] for r in items}
    for r in items:
        assert len(r["distractors"]) == passage_qa.POOL == len(set(r["distractors"]))
        start = r["evidence"].index(r["question"] + " ")  # a sentence of the evidence starts so
        assert r["evidence"][start + len(r["question"]) + 1 :].startswith(r["target"])
        assert target_word(r["target"]) == r["target"]
        assert len(r["question"].split()) >= passage_qa.QUESTION_WORDS
        for d in r["distractors"]:
            assert r["target"].lower() not in words(pool[d]) and r["question"] not in pool[d]
            assert pool[d] not in evidence
        for text in [r["evidence"]] + [pool[d] for d in r["distractors"]]:
            for sentence in corpora.split_sentences(text):  # none of the other tasks'
                assert not any(sentence in u for u in used), sentence


def test_python_rendering_equals_lm_evals(posgen_tm) -> None:
    tasks = posgen_tm.load(list(depth_suite.TASKS))["tasks"]
    for name, task in tasks.items():
        for doc in list(task.eval_docs)[:3]:
            assert task.doc_to_text(doc) == depth_suite.render_context(name, doc)
            assert doc["posgen_k"] == depth_suite.DEFAULT_PASSAGES[name]
            assert doc["posgen_passages"] == doc["passages"]


@pytest.mark.parametrize("depth", [0.0, 0.25, 0.5, 0.75, 1.0])
def test_moved_tasks_put_the_evidence_on_its_exact_slot(posgen_tm, depth) -> None:
    level = f"{round(depth * 100)}pct"
    names = [f"perm_depth_{level}_{t}" for t in ("posgen_kv", "posgen_passage_qa")]
    tasks = posgen_tm.load(names)["tasks"]
    for name in names:
        base = name.removeprefix(f"perm_depth_{level}_")
        originals = {d["doc_id"]: d for d in depth_suite.documents(base)}
        for doc in tasks[name].eval_docs:
            k, t = doc["posgen_k"], doc["evidence"]
            orig = originals[doc["posgen_doc_id"]]
            assert t == depth * (k - 1) and doc["posgen_evidence_depth"] == depth
            assert doc["passages"][t] == orig["passages"][orig["evidence"]]
            rest = [p for i, p in enumerate(orig["passages"]) if i != orig["evidence"]]
            assert [p for i, p in enumerate(doc["passages"]) if i != t] == rest
            assert doc["target"] == orig["target"] and doc["question"] == orig["question"]
            assert doc["posgen_depth_nominal"] == depth
            assert doc["posgen_depth_source"] == orig["evidence"]


def test_the_groups_hold_the_depth_tasks(posgen_tm) -> None:
    loaded = posgen_tm.load(["perm_depth_25pct"])
    assert set(loaded["tasks"]) == {f"perm_depth_25pct_{t}" for t in depth_suite.TASKS}
    assert set(posgen_tm.load([depth_suite.GROUP])["tasks"]) == set(depth_suite.TASKS)


def test_length_variants_resolve_by_name(posgen_tm) -> None:
    tasks = posgen_tm.load(["posgen_passage_qa_n20", "perm_depth_100pct_posgen_kv_n60"])["tasks"]
    assert {len(d["passages"]) for d in tasks["posgen_passage_qa_n20"].eval_docs} == {20}
    moved = tasks["perm_depth_100pct_posgen_kv_n60"]
    assert {d["evidence"] for d in moved.eval_docs} == {59}
    assert moved.config.metadata[depth_suite.N_KEY] == 60
    for bad, top in (("posgen_kv_n1", 512), ("posgen_passage_qa_n49", 48)):
        with pytest.raises(DepthTaskError, match=rf"an integer from 2 to {top}"):
            posgen_tm.match_tasks([bad])
    assert depth_suite.parse_variant("posgen_prose_n3") is None  # not a depth task
    assert depth_suite.variant_name("posgen_kv_mc", 40) == "posgen_kv_mc_n40"


def test_the_lengths_metadata_key_sets_the_passages() -> None:
    """``lm_eval --metadata '{"posgen_n_passages": 5}'`` (the task manager's metadata)."""
    from posgen.tasks.lm_eval_tasks import task_manager

    tm = task_manager(metadata={depth_suite.N_KEY: 5})
    tasks = tm.load(["posgen_kv_gen", "perm_depth_0pct_posgen_passage_qa"])["tasks"]
    for task in tasks.values():
        assert {len(d["passages"]) for d in task.eval_docs} == {5}


def word_counter(text: str) -> int:
    return len(text.split())


def test_tokens_map_to_the_largest_n_that_fits() -> None:
    for task in ("posgen_kv", "posgen_passage_qa"):
        choice = depth_lengths.passages_for_length(task, 600, word_counter)
        n = choice.n_passages
        assert choice.mean_tokens <= 600 < depth_lengths.mean_tokens(task, n + 1, word_counter)[0]
        assert choice.task == f"{task}_n{n}" and choice.max_tokens >= choice.mean_tokens
    assert depth_lengths.tokens_for_fraction(0.25, 8192) == 2048


@pytest.mark.parametrize(
    ("tokens", "limit", "match"),
    [
        (3, None, "shorter than its 2-passage documents"),
        (10**6, None, r"past what its items hold \(512 passages"),
        (4096, 2048, "past what the model holds"),
        (0, None, "positive integer"),
    ],
)
def test_lengths_out_of_reach_are_refused(tokens, limit, match) -> None:
    with pytest.raises(DepthTaskError, match=match) as err:
        depth_lengths.passages_for_length("posgen_kv", tokens, word_counter, limit)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize("fraction", [0, 1.5, -0.1, True])
def test_fractions_outside_the_context_are_refused(fraction) -> None:
    with pytest.raises(DepthTaskError, match=r"in \(0, 1\]"):
        depth_lengths.tokens_for_fraction(fraction, 8192)
