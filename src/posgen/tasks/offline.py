"""The offline suite: lm-eval tasks built from English text that installs offline.

``posgen_prose`` (perplexity, ``loglikelihood_rolling``)
    12 documents of 200-260 words (so that 1% word swap moves one pair), cut at sentence
    (or speech) boundaries from the three sources of :mod:`posgen.tasks.corpora`: 5 from
    the Britannica article, 3 from the Python documentation topics, 4 from four plays
    (one each). Within a source the
    documents are evenly spaced over its chunks (chunk ``floor((i + 1/2) * N / k)`` for
    i = 0..k-1), so they cover the whole text. Metrics: ``word_perplexity`` (primary),
    ``byte_perplexity``, ``bits_per_byte``.

``posgen_cloze`` (accuracy, ``loglikelihood``; LAMBADA-style last-word cloze)
    64 items (32 Britannica, 32 Python documentation). Candidates: for every sentence
    end, the shortest run of whole sentences ending there with at least 30 words (and at
    most 60). A candidate qualifies when the final word of its last sentence (trailing
    punctuation removed) is a word of at least four letters, not a stop word, that
    already occurs earlier in the run, so that, as in LAMBADA, the answer can be
    recovered from the context. The context is the run without that final word (it ends
    mid-sentence); the target is the word with a leading space. Runs that share a
    sentence with a ``posgen_prose`` document are skipped. Items are chosen per source in
    the order of the SHA-256 of their id, skipping any that shares a sentence with an
    item already chosen, then kept in source order.
    Metrics: ``acc`` (the target is the greedy continuation; primary) and
    ``perplexity`` of the target.

``posgen_recall`` (exact match, ``generate_until``; not in the default suite: its cost)
    48 items (16 Britannica, 32 Python documentation): a passage, the start of the
    sentence that follows it, and the word that finishes it, recalled from the passage
    (:mod:`posgen.tasks.recall` has the construction). Items share no sentence with the
    other two tasks. Metric: ``exact_match`` of the first generated word.

The evidence-depth tasks' items (not in the default suite; :mod:`posgen.tasks.depth_suite`)
    ``posgen_kv.jsonl`` (24 key-value items: word pairs drawn from the Britannica
    article's vocabulary, :mod:`posgen.tasks.kv`), ``posgen_passage_qa.jsonl`` (24
    multi-passage items, 12 Britannica, 12 Python documentation) and
    ``posgen_passage_pool.jsonl`` (their distractor passages; :mod:`posgen.tasks.passage_qa`).
    The passages share no sentence with the three tasks above.

The JSONL files ship in ``posgen/tasks/data/`` with ``MANIFEST.json`` (suite version,
sha256 of each file and of each source), next to ``PROBE_FILE``: the cleaned Britannica
article (:func:`posgen.tasks.corpora.britannica_text`), the decomposition's probe text, and
four plays from Act II on (``long_<play>.txt``, with the article ``posgen length``'s
documents), so that nothing posgen reads at run time needs the corpus package. ``python -m posgen.tasks.offline --check``
rebuilds them and compares bytes; ``--write`` rewrites them. Every doc carries a stable
``doc_id`` (e.g. ``prose-britannica-012``), so per-document results pair across runs.
Sizes: one pass over the suite is about 8.4k SmolLM2 tokens; on SmolLM2-135M it took
40 CPU-seconds on one thread (prose 24.7 s, cloze 15.8 s, batch 8, fp32), so about
20-25 s on two idle cores. Version 1 (20 documents, 96 items) was 1.6 times that.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import re
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from posgen.atomic import atomic_write_bytes
from posgen.tasks import corpora, kv, passage_qa, recall
from posgen.tasks.sentence_items import pick_disjoint, target_word

SUITE_VERSION = 2
GENERATIVE_TASKS = ("posgen_recall",)
SUITE_TASKS_WITH_GENERATION = ("posgen_prose", "posgen_cloze", *GENERATIVE_TASKS)
TASKS = SUITE_TASKS_WITH_GENERATION  # every task this module builds data for
# The default suite (``posgen run``, the shipped groups): perplexity, cloze accuracy and
# a generated answer (its 16 cells add about 1 min 45 s to the default run on two idle
# CPU cores: docs/tasks.md).
SUITE_TASKS = SUITE_TASKS_WITH_GENERATION
DATA_DIR = Path(__file__).parent / "data"
MANIFEST = "MANIFEST.json"
PROBE_FILE = "britannica_11th_shakespeare.txt"

# the evidence-depth tasks' data (posgen.tasks.depth_suite reads it)
DEPTH_FILES = {
    "kv": "posgen_kv.jsonl",
    "passage_qa": "posgen_passage_qa.jsonl",
    "passage_pool": "posgen_passage_pool.jsonl",
}
PROSE_QUOTA = {"britannica": 5, "pydoc": 3, "plays": 4}
PROSE_WORDS = (200, 260)
CLOZE_QUOTA = {"britannica": 32, "pydoc": 32}
CLOZE_WORDS = 30


def _pick_even(items: list, k: int) -> list:
    n = len(items)
    if n < k:
        raise ValueError(f"need {k} chunks, the source gives only {n}")
    return [items[(2 * i + 1) * n // (2 * k)] for i in range(k)]


def build_prose() -> list[dict[str, Any]]:
    """The ``posgen_prose`` documents (see the module docstring)."""
    rows = []
    lo, hi = PROSE_WORDS
    for source, k in PROSE_QUOTA.items():
        chunks = [(i, c) for i, c in enumerate(corpora.chunks(source, lo)) if c.n_words <= hi]
        if source == "plays":
            picked = [
                _pick_even([ic for ic in chunks if ic[1].origin == play], 1)[0]
                for play in corpora.PLAYS
            ]
        else:
            picked = _pick_even(chunks, k)
        for i, chunk in picked:
            rows.append(
                {
                    "doc_id": f"prose-{source}-{i:03d}",
                    "source": source,
                    "origin": chunk.origin,
                    "text": chunk.text,
                    "n_words": chunk.n_words,
                }
            )
    return rows


def cloze_item(context_sentences: Sequence[str]) -> tuple[str, str] | None:
    """(context, target) from consecutive sentences, or None when the last word of the
    last sentence does not qualify (see the module docstring)."""
    words = " ".join(context_sentences).split(" ")
    target = target_word(words[-1])
    earlier = {re.sub(r"\W+", "", w) for w in words[:-1]}
    if target is None or target not in earlier:
        return None
    return " ".join(words[:-1]), target


def _cloze_windows(sentences: list[str]) -> list[tuple[int, int]]:
    """For each sentence end j, the shortest window [a, j] of at least CLOZE_WORDS words
    (and at most twice that), as (a, j)."""
    out = []
    for j in range(len(sentences)):
        n, a = 0, j
        while a >= 0 and n < CLOZE_WORDS:
            n += len(sentences[a].split())
            a -= 1
        if n >= CLOZE_WORDS and n <= 2 * CLOZE_WORDS:
            out.append((a + 1, j))
    return out


def build_cloze(prose: Sequence[dict[str, Any]]) -> list[dict[str, Any]]:
    """The ``posgen_cloze`` items (see the module docstring)."""
    prose_text = "\n".join(row["text"] for row in prose)
    rows = []
    for source, k in CLOZE_QUOTA.items():
        cands = []
        for s_i, (origin, sents) in enumerate(corpora.sentence_streams(source)):
            for a, j in _cloze_windows(sents):
                item = cloze_item(sents[a : j + 1])
                if item is None or any(x in prose_text for x in sents[a : j + 1]):
                    continue
                doc_id = f"cloze-{source}-{s_i:02d}-{j:04d}"
                rank = hashlib.sha256(f"posgen_cloze/v{SUITE_VERSION}/{doc_id}".encode())
                cands.append((rank.hexdigest(), (s_i, a, j), doc_id, origin, item))
        for _, _, doc_id, origin, (context, target) in pick_disjoint(cands, k, f"{source} cloze"):
            rows.append(
                {
                    "doc_id": doc_id,
                    "source": source,
                    "origin": origin,
                    "context": context,
                    "target": target,
                }
            )
    return rows


def _jsonl(rows: Sequence[dict[str, Any]]) -> bytes:
    return "".join(json.dumps(r, ensure_ascii=False, sort_keys=True) + "\n" for r in rows).encode(
        "utf-8"
    )


def build_files() -> dict[str, bytes]:
    """Every shipped data file, as bytes: the tasks' JSONL files, the texts and the manifest."""
    prose = build_prose()
    cloze = build_cloze(prose)
    used = [r["text"] for r in prose] + [f"{r['context']} {r['target']}" for r in cloze]
    recall_rows = recall.build_recall(used)
    used += [f"{r['passage']} {r['question']} {r['target']}" for r in recall_rows]
    qa_items, qa_pool = passage_qa.build_passage_qa(used)
    files = {
        "posgen_prose.jsonl": _jsonl(prose),
        "posgen_cloze.jsonl": _jsonl(cloze),
        "posgen_recall.jsonl": _jsonl(recall_rows),
        DEPTH_FILES["kv"]: _jsonl(kv.build_kv(corpora.britannica_text())),
        DEPTH_FILES["passage_qa"]: _jsonl(qa_items),
        DEPTH_FILES["passage_pool"]: _jsonl(qa_pool),
    }
    files[PROBE_FILE] = corpora.britannica_text().encode("utf-8")
    for play in corpora.PLAYS:  # posgen length's long documents (with the article above)
        files[long_play_file(play)] = "\n\n".join(corpora.play_speeches(play)).encode("utf-8")
    manifest = {
        "suite_version": SUITE_VERSION,
        "builder": "posgen.tasks.offline",
        "files": {n: hashlib.sha256(b).hexdigest() for n, b in sorted(files.items())},
        "sources": corpora.source_fingerprints(),
    }
    files[MANIFEST] = (json.dumps(manifest, indent=2, sort_keys=True) + "\n").encode()
    return files


def long_play_file(play: str) -> str:
    """The shipped file of a play's text from Act II on (``posgen length``'s documents)."""
    return f"long_{play}.txt"


def read_manifest() -> dict[str, Any]:
    return json.loads((DATA_DIR / MANIFEST).read_text(encoding="utf-8"))


def load_bytes(name: str) -> bytes:
    """A shipped data file, after checking its sha256 against the manifest."""
    path = DATA_DIR / name
    data = path.read_bytes() if path.is_file() else b""
    expected = read_manifest()["files"].get(name)
    if hashlib.sha256(data).hexdigest() != expected:
        raise RuntimeError(
            f"{path} is missing or does not match its sha256 in {MANIFEST}; "
            "reinstall posgen or run `python -m posgen.tasks.offline --write`"
        )
    return data


def load_rows(name: str) -> list[dict[str, Any]]:
    """The rows of a shipped JSONL file, after checking its sha256 against the manifest."""
    return [json.loads(line) for line in load_bytes(name).decode("utf-8").splitlines()]


def probe_britannica() -> str:
    """The shipped, cleaned Britannica article (``PROBE_FILE``), checked against the manifest."""
    return load_bytes(PROBE_FILE).decode("utf-8")


def _dataset(name: str):
    import datasets

    return datasets.DatasetDict({"test": datasets.Dataset.from_list(load_rows(name))})


def prose_dataset(**_: Any):
    """lm-eval ``custom_dataset`` of ``posgen_prose`` (ignores the metadata it is passed)."""
    return _dataset("posgen_prose.jsonl")


def cloze_dataset(**_: Any):
    """lm-eval ``custom_dataset`` of ``posgen_cloze`` (ignores the metadata it is passed)."""
    return _dataset("posgen_cloze.jsonl")


def recall_dataset(**_: Any):
    """lm-eval ``custom_dataset`` of ``posgen_recall`` (ignores the metadata it is passed)."""
    return _dataset("posgen_recall.jsonl")


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m posgen.tasks.offline",
        description="Build or check the offline suite's data.",
    )
    mode = parser.add_mutually_exclusive_group(required=True)
    mode.add_argument("--write", action="store_true", help="rewrite the shipped files")
    mode.add_argument("--check", action="store_true", help="rebuild and compare bytes")
    args = parser.parse_args(argv)
    files = build_files()
    if args.write:
        for name, data in files.items():
            atomic_write_bytes(DATA_DIR / name, data)
        print(f"wrote {', '.join(sorted(files))} to {DATA_DIR}")
        return 0
    stale = [
        n
        for n, b in files.items()
        if not (DATA_DIR / n).is_file() or (DATA_DIR / n).read_bytes() != b
    ]
    print("up to date" if not stale else f"differs: {', '.join(sorted(stale))}")
    return 1 if stale else 0


if __name__ == "__main__":
    sys.exit(main())
