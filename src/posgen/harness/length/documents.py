"""The documents of ``posgen length``: the built-in long texts, or the user's own.

Sources (:func:`open_documents`):

- built in: five long public-domain texts shipped with posgen;
- ``--data PATH``: a text file (one document), a folder of ``.txt`` files (one document
  each, sorted by relative path, sub-folders included) or a JSONL file (one document per
  line, its text in ``--text-field``, default ``text``);
- ``--dataset NAME[:CONFIG]:SPLIT[:FIELD]``: a split of a dataset through ``datasets``
  (``load_dataset``; a folder written by ``Dataset.save_to_disk`` is read with
  ``load_from_disk``). FIELD defaults to ``--text-field`` (``text``). With three parts the
  middle one is the split when it names one (train, validation, test, ...), else the
  config: ``pg19:test:text`` is NAME:SPLIT:FIELD, ``wikitext:wikitext-103-raw-v1:test``
  NAME:CONFIG:SPLIT.

Every document is a :class:`Document` (an id, where it came from, its text). The id of a
user document ends in the first 12 hex digits of its SHA-256 (``notes.txt@3fa9c1d2e4b5``),
and the run folder records every document's source and full hash, so a rerun into the
same folder or a gate check against a baseline on other documents is refused. Sources
are checked when opened (path, format, field, dataset) and read lazily. :func:`select`
tokenizes documents in source order and keeps the first ``n`` that reach ``max_length``
tokens: shorter ones are skipped and counted, never padded.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from posgen.harness.input_error import InputError
from posgen.tasks.long_documents import long_documents

SPLIT_NAMES = ("train", "validation", "valid", "dev", "test")


class DocumentError(InputError):
    """Documents that cannot be read or do not suffice; the message says what to do."""


@dataclass(frozen=True)
class Document:
    """One document: ``doc_id`` (unique in a run), ``source`` (where it was read) and text."""

    doc_id: str
    source: str
    text: str = field(repr=False)

    @property
    def sha256(self) -> str:
        return hashlib.sha256(self.text.encode("utf-8")).hexdigest()

    def describe(self) -> dict[str, str]:
        """What the run folder records of the document."""
        return {"source": self.source, "sha256": self.sha256}


def builtin_documents() -> Iterator[Document]:
    """The five long texts shipped with posgen (:mod:`posgen.tasks.long_documents`)."""

    for doc_id, text in long_documents().items():
        yield Document(doc_id, f"posgen:{doc_id}", text)


def user_document(name: str, source: str, text: str) -> Document:
    """A user's document, its id ``name@<12 hex of its SHA-256>``."""
    digest = hashlib.sha256(text.encode("utf-8")).hexdigest()
    return Document(f"{name}@{digest[:12]}", source, text)


def open_documents(
    data: str | None = None, dataset: str | None = None, text_field: str | None = None
) -> Iterator[Document]:
    """The documents of a run: ``data`` (a path), ``dataset`` (a spec) or the built-in
    ones. Checked now (raises :class:`DocumentError`), read lazily."""
    if data is not None and dataset is not None:
        raise DocumentError("give --data or --dataset, not both")
    if data is not None:
        return _from_path(Path(data).expanduser(), text_field)
    if dataset is not None:
        return _from_dataset(dataset, text_field)
    if text_field is not None:
        raise DocumentError("--text-field applies to --data JSONL or --dataset only")
    return builtin_documents()


def _from_path(path: Path, text_field: str | None) -> Iterator[Document]:
    if not path.exists():
        raise DocumentError(f"--data {path}: no such file or folder")
    if path.is_dir():
        files = sorted(p for p in path.rglob("*.txt") if p.is_file())
        if not files:
            raise DocumentError(f"--data {path}: the folder holds no .txt file")
        if text_field is not None:
            raise DocumentError("--text-field applies to a JSONL file, not a folder of .txt")
        return (
            user_document(str(f.relative_to(path)), f"file:{f.resolve()}", _read(f)) for f in files
        )
    if path.suffix in (".jsonl", ".ndjson"):
        return _from_jsonl(path, text_field or "text")
    if text_field is not None:
        raise DocumentError(f"--text-field applies to a JSONL file (.jsonl), not {path.name}")
    return iter([user_document(path.name, f"file:{path.resolve()}", _read(path))])


def _read(path: Path) -> str:
    try:
        return path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise DocumentError(f"--data {path}: not readable as UTF-8 text ({e})") from None


def _from_jsonl(path: Path, field_name: str) -> Iterator[Document]:
    lines = _read(path).splitlines()
    texts = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as e:
            raise DocumentError(f"--data {path}, line {number}: not JSON ({e})") from None
        texts.append((number, _row_text(row, field_name, f"--data {path}, line {number}")))
    if not texts:
        raise DocumentError(f"--data {path}: no JSON lines")
    return (user_document(f"{path.name}:{n}", f"file:{path.resolve()}:{n}", t) for n, t in texts)


def _row_text(row: Any, field_name: str, where: str) -> str:
    """The text field of one JSON row; anything else is refused saying what was found."""
    if not isinstance(row, dict):
        raise DocumentError(
            f"{where}: {_json_kind(row)}, not an object with a text field {field_name!r}"
        )
    if field_name not in row:
        raise DocumentError(
            f"{where}: no text field {field_name!r} (has {sorted(row)}); name it with --text-field"
        )
    text = row[field_name]
    if not isinstance(text, str):
        found = _json_kind(text) + ("" if text is None else f" ({json.dumps(text)[:40]})")
        raise DocumentError(f"{where}: field {field_name!r} is {found}, not text")
    return text


def _json_kind(value: Any) -> str:
    """What a JSON value is, in words (``null``, ``a number``, ...)."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, (int, float)):
        return "a number"
    return {list: "an array", dict: "an object", str: "a string"}.get(type(value), "a value")


def parse_dataset_spec(spec: str, text_field: str | None) -> tuple[str, str | None, str, str]:
    """``NAME[:CONFIG]:SPLIT[:FIELD]`` -> (name, config, split, field)."""
    parts = spec.split(":")
    if len(parts) < 2 or len(parts) > 4 or not all(parts):
        raise DocumentError(
            f"--dataset {spec!r}: give NAME[:CONFIG]:SPLIT[:FIELD], e.g. pg19:test or "
            "wikitext:wikitext-103-raw-v1:test:text"
        )
    if len(parts) == 4:
        name, config, split, field_name = parts
    elif len(parts) == 3 and parts[1].split("[")[0] in SPLIT_NAMES:
        (name, split, field_name), config = parts, None
    elif len(parts) == 3:
        (name, config, split), field_name = parts, text_field or "text"
    else:
        (name, split), config, field_name = parts, None, text_field or "text"
    return name, config, split, field_name


def _from_dataset(spec: str, text_field: str | None) -> Iterator[Document]:
    name, config, split, field_name = parse_dataset_spec(spec, text_field)
    rows = _load_split(spec, name, config, split)
    if field_name not in rows.column_names:
        raise DocumentError(
            f"--dataset {spec}: split {split!r} has no field {field_name!r} "
            f"(fields: {', '.join(rows.column_names)})"
        )
    where = f"dataset:{name}{f':{config}' if config else ''}:{split}"
    return (
        user_document(f"{split}:{i}", f"{where}[{i}].{field_name}", str(row[field_name]))
        for i, row in enumerate(rows)
    )


def _load_split(spec: str, name: str, config: str | None, split: str) -> Any:
    """The split, from a ``save_to_disk`` folder or through ``load_dataset`` (the hub or
    its cache); any failure is one line that names the cache."""
    import datasets

    folder = Path(name).expanduser()
    try:
        if folder.is_dir() and (
            (folder / "dataset_dict.json").is_file() or (folder / "state.json").is_file()
        ):
            loaded = datasets.load_from_disk(str(folder))
            if isinstance(loaded, datasets.DatasetDict):
                if split not in loaded:
                    raise DocumentError(
                        f"--dataset {spec}: no split {split!r} (splits: {', '.join(loaded)})"
                    )
                return loaded[split]
            return loaded
        return datasets.load_dataset(name, config, split=split)
    except DocumentError:
        raise
    except Exception as e:  # hub unreachable, not cached, no such split or config, ...
        cache = datasets.config.HF_DATASETS_CACHE
        offline = " (offline)" if datasets.config.HF_HUB_OFFLINE else ""
        raise DocumentError(
            f"--dataset {spec}: cannot load it{offline}: {type(e).__name__}: "
            f"{' '.join(str(e).split())[:200]}; "
            f"it must be reachable on the hub or in the datasets cache {cache}, "
            "or pass a folder written by Dataset.save_to_disk"
        ) from None


@dataclass
class Selection:
    """The kept documents with their token ids (cut to ``max_length``), and how many
    shorter ones were skipped."""

    documents: list[Document]
    token_ids: dict[str, list[int]]
    skipped: int = 0
    shortest: dict[str, int] = field(default_factory=dict)  # a few skipped: id -> tokens


def select(
    documents: Iterable[Document],
    tokenize: Callable[[str], list[int]],
    max_length: int,
    n: int | None,
) -> Selection:
    """The first ``n`` documents (all when None) of at least ``max_length`` tokens, each
    cut to its first ``max_length`` tokens; shorter ones are skipped and counted."""
    out = Selection([], {})
    seen: set[str] = set()
    for doc in documents:
        if doc.doc_id in seen:
            raise DocumentError(f"two documents are named {doc.doc_id!r}")
        seen.add(doc.doc_id)
        ids = tokenize(doc.text)
        if len(ids) < max_length:
            out.skipped += 1
            if len(out.shortest) < 3:
                out.shortest[doc.doc_id] = len(ids)
            continue
        out.documents.append(doc)
        out.token_ids[doc.doc_id] = list(ids[:max_length])
        if n is not None and len(out.documents) == n:
            break
    return out


def describe_shortfall(sel: Selection, wanted: int | None, max_length: int) -> str | None:
    """Why the selection does not suffice (None when it does)."""
    have = len(sel.documents)
    if have and (wanted is None or have >= wanted):
        return None
    examples = ", ".join(f"{k}: {v}" for k, v in sel.shortest.items())
    need = f"{wanted} document(s)" if wanted else "a document"
    return (
        f"need {need} of at least --max-length {max_length} tokens, found {have} "
        f"({sel.skipped} shorter skipped{f', e.g. {examples}' if examples else ''}); "
        "lower --max-length or --documents, or give longer documents"
    )


def records(docs: list[Document]) -> dict[str, Any]:
    """``{doc_id: {source, sha256}}`` in run order."""
    return {d.doc_id: d.describe() for d in docs}
