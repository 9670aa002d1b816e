"""A local model folder's identity: the content of the files that decide what it scores.

:func:`content_revision` is ``local-content:<16 hex>``: SHA-256 over the name and content
digest of every file of :data:`IDENTITY_FILES` in the folder (the weights, config,
tokenizer, chat templates, remote code). A checkpoint rewritten at the same path, even
with the same size (a job that retrains into one folder), gets another revision, so a
rerun of a command into a folder it wrote with the old weights is refused, naming
``revision`` (:mod:`posgen.results.folder.protocol`), before any cell is resumed.

Cost: a file's digest is a SHA-256 over the SHA-256 of each 16 MiB chunk, the chunks read
and hashed by up to 8 threads (hashlib releases the GIL, so free cores share the work):
the first run reads the weights once (``benchmarks/bench_fingerprint.py``).
Each digest is cached in ``<posgen cache>/file-digests.json`` under the file's real path
with its (device, inode, size, mtime_ns, ctime_ns): any rewrite of a file changes its
ctime, which no user tool can set back, so a later run of an unchanged checkpoint costs
one ``stat`` per file. A file changed less than :data:`RACY_SECONDS` ago is not cached
(the file system's clock may not have ticked since: the check of git's "racily clean"
entries). A cache that cannot be read or written is ignored: the digests are computed.

:func:`legacy_revision` is the revision of earlier releases, ``local:<12 hex>`` of
config.json and the weight files' names and sizes; folders written with it are resumed
with a note (:mod:`posgen.results.folder.model_identity`).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from posgen.atomic import atomic_write_text
from posgen.harness import embedded  # looked up at call time (tests replace its cache)
from posgen.harness.loading.options import LoadError

log = logging.getLogger(__name__)

CONTENT_PREFIX = "local-content:"
LEGACY_PREFIX = "local:"

#: the files of a model folder that are its identity, each with why: a file that none
#: matches (a README, training logs, an optimizer's state) may change freely
IDENTITY_FILES: tuple[tuple[str, str], ...] = (
    ("config.json", "the architecture and its settings"),
    ("generation_config.json", "generation's defaults (end tokens, sampling) a task leaves"),
    ("*.safetensors", "the weights, one file or shards"),
    ("*.bin", "the weights in PyTorch's format (pytorch_model*.bin)"),
    ("*.index.json", "which shard holds which weight"),
    ("tokenizer.json", "the tokenizer: the tokens every document is scored as"),
    ("tokenizer_config.json", "the tokenizer's settings: special tokens, BOS, a chat template"),
    ("special_tokens_map.json", "the special tokens"),
    ("added_tokens.json", "tokens added to the vocabulary"),
    ("vocab.json", "a BPE vocabulary"),
    ("merges.txt", "a BPE tokenizer's merges"),
    ("vocab.txt", "a WordPiece vocabulary"),
    ("*.model", "a SentencePiece tokenizer"),
    ("*.tiktoken", "a tiktoken vocabulary"),
    ("chat_template.jinja", "the chat template (--apply-chat-template)"),
    ("chat_template.json", "the chat template, in its older file"),
    ("additional_chat_templates/*.jinja", "named chat templates (--apply-chat-template NAME)"),
    ("*.py", "the model's own code (--trust-remote-code)"),
)

HASH_FORM = "sha256-tree-16MiB"  # the digest's form, recorded in the cache
CHUNK = 16 << 20
WORKERS = max(1, min(8, os.cpu_count() or 1))
PROGRESS_BYTES = 1 << 30  # a note and a progress bar when more than this is read
RACY_SECONDS = 2.0
CACHE_FILE = "file-digests.json"
CACHE_ENTRIES = 4096


def identity_files(folder: Path) -> list[Path]:
    """The files of :data:`IDENTITY_FILES` in ``folder``, sorted by their relative path."""
    found = {p for pattern, _ in IDENTITY_FILES for p in folder.glob(pattern) if p.is_file()}
    return sorted(found, key=lambda p: p.relative_to(folder).as_posix())


def content_revision(folder: Path) -> str:
    """``local-content:<16 hex>``: the folder's identity files, by name and content."""
    files = identity_files(folder)
    digests = file_digests(files)
    h = hashlib.sha256(HASH_FORM.encode())
    for path in files:
        h.update(f"\n{path.relative_to(folder).as_posix()}\0{digests[path]}".encode())
    return CONTENT_PREFIX + h.hexdigest()[:16]


def folder_record(pretrained: object) -> dict[str, str] | None:
    """What ``hf-posgen`` records of a local model folder in lm-eval's results
    (``config.posgen_model``): its resolved path and content revision, so that ``posgen
    ingest`` tells two models under one name apart; None for a hub id or a built model."""
    if not isinstance(pretrained, str | os.PathLike) or not Path(pretrained).is_dir():
        return None
    folder = Path(pretrained).resolve()
    return {"path": str(folder), "revision": content_revision(folder)}


def legacy_revision(folder: Path) -> str:
    """The revision earlier releases recorded: SHA-256 of config.json and the weight
    files' names and sizes, ``local:<12 hex>`` (blind to a same-size rewrite)."""
    h = hashlib.sha256((folder / "config.json").read_bytes())
    for f in sorted(folder.glob("*.safetensors")) + sorted(folder.glob("*.bin")):
        h.update(f"{f.name}:{f.stat().st_size}".encode())
    return f"{LEGACY_PREFIX}{h.hexdigest()[:12]}"


def file_digests(files: list[Path]) -> dict[Path, str]:
    """Each file's digest: from the cache where its key still holds, else read."""
    cache = _read_cache()
    out: dict[Path, str] = {}
    todo: list[tuple[Path, str, os.stat_result]] = []
    for path in files:
        real = os.path.realpath(path)
        st = os.stat(real)
        hit = cache.get(real)
        if isinstance(hit, dict) and hit.get("stat") == _key(st) and _is_digest(hit.get("sha256")):
            out[path] = hit["sha256"]
        else:
            todo.append((path, real, st))
    if not todo:
        return out
    total = sum(st.st_size for *_, st in todo)
    new: dict[str, dict] = {}
    with _Progress(total) as advance:
        for path, real, st in todo:
            try:
                out[path] = read_digest(real, st, advance)
            except OSError as e:
                raise LoadError(
                    f"{path}: cannot read it to identify the model ({e.strerror or e})"
                ) from None
            if time.time_ns() - st.st_ctime_ns > RACY_SECONDS * 1e9:
                new[real] = {"stat": _key(st), "sha256": out[path]}
    if new:
        _write_cache(new)
    return out


def read_digest(path: str, st: os.stat_result, advance: Callable[[int], None]) -> str:
    """The file's digest, read: SHA-256 over its size and each 16 MiB chunk's SHA-256
    (chunks hashed in parallel). A file that changes while it is read is refused."""

    def chunk(offset: int) -> bytes:
        with open(path, "rb") as f:
            f.seek(offset)
            data = f.read(CHUNK)
        if len(data) != min(CHUNK, st.st_size - offset):
            raise LoadError(f"{path} changed while posgen read it; rerun once it is written")
        advance(len(data))
        return hashlib.sha256(data).digest()

    with ThreadPoolExecutor(WORKERS) as pool:
        parts = list(pool.map(chunk, range(0, st.st_size, CHUNK)))
    if _key(os.stat(path)) != _key(st):
        raise LoadError(f"{path} changed while posgen read it; rerun once it is written")
    h = hashlib.sha256(f"{HASH_FORM}:{st.st_size}:".encode())
    for part in parts:
        h.update(part)
    return h.hexdigest()


def _key(st: os.stat_result) -> list[int]:
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns]


def _is_digest(value: object) -> bool:
    return isinstance(value, str) and len(value) == 64


class _Progress:
    """``advance(n)`` for ``n`` bytes read; over :data:`PROGRESS_BYTES` a note on the
    ``posgen`` logger and a tqdm bar (on a terminal)."""

    def __init__(self, total: int) -> None:
        self.total, self.bar, self.lock = total, None, threading.Lock()

    def __enter__(self) -> Callable[[int], None]:
        if self.total > PROGRESS_BYTES:
            from tqdm.auto import tqdm

            log.info(
                "reading %.1f GB of model files once to identify the model by content "
                "(later runs read a cache)",
                self.total / 1e9,
            )
            self.bar = tqdm(
                total=self.total, unit="B", unit_scale=True, desc="model identity", disable=None
            )
        return self.advance

    def advance(self, n: int) -> None:
        if self.bar is not None:
            with self.lock:
                self.bar.update(n)

    def __exit__(self, *exc: object) -> None:
        if self.bar is not None:
            self.bar.close()


def cache_path() -> Path:
    return embedded.cache_dir() / CACHE_FILE


def _read_cache() -> dict[str, object]:
    """The cached digests, or none where the cache is missing, unreadable or of another
    form."""
    try:
        data = json.loads(cache_path().read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict) or data.get("form") != HASH_FORM:
        return {}
    files = data.get("files")
    return files if isinstance(files, dict) else {}


def _write_cache(new: dict[str, dict]) -> None:
    """Add ``new`` to the cache (atomically; the entries of files gone are dropped, the
    oldest beyond :data:`CACHE_ENTRIES` too). A cache that cannot be written is skipped."""
    files = {k: v for k, v in _read_cache().items() if k not in new and os.path.exists(k)}
    files.update(new)
    kept = dict(list(files.items())[-CACHE_ENTRIES:])
    try:
        atomic_write_text(cache_path(), json.dumps({"form": HASH_FORM, "files": kept}))
    except OSError as e:
        log.debug("model file digests not cached (%s)", e)
