"""The typed configuration of a ``posgen length`` run folder, and its ``config.json``.

``posgen length`` builds a :class:`LengthConfig` (:mod:`posgen.harness.cli.length`), and
so does ``posgen run --length`` for each model of its sweep; the runner, the scores
(:mod:`posgen.results.scores.length`) and the gate (:mod:`posgen.results.gate.length`)
take it typed. The folder holds it as::

    config.json   {"schema": 1, "config": LengthConfig.to_dict(), "config_sha256": SHA-256}

``to_dict()`` gives exactly the dict of earlier releases (``decompose`` and
``window_stride`` only when set), so
the hash and the default folder name of every earlier run hold. A rerun into a folder
holding another config is refused, naming the settings that differ.
"""

from __future__ import annotations

import hashlib
import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np

from posgen.perturbations.length import LengthPerturbation, parse_length
from posgen.results.folder.config import ModelEntry
from posgen.results.folder.folder_kind import folder_refusal
from posgen.results.folder.model_identity import legacy_resume, show
from posgen.results.folder.protocol import CommandFolder
from posgen.results.folder.schema import SchemaError, config_hash
from posgen.results.folder.store import (
    RUNS_ROOT,
    RunConflictError,
    atomic_write_json,
    describe_diff,
    read_json,
    slug,
)

LENGTH_SCHEMA = 1
CONFIG_FILE = "config.json"


@dataclass(frozen=True)
class LengthConfig:
    """Everything that determines the figures of one ``posgen length`` run.

    ``model`` is the model's label and ``model_entry`` how it was loaded (None: not
    recorded, as in folders written before entries existed); ``document_sources`` each
    document's source and SHA-256, so that a rerun on another model or other documents
    is refused; ``skipped_documents`` counts the shorter ones read before the kept ones."""

    model: str
    max_length: int
    trained_context: int
    schemes: tuple[str, ...]
    documents: tuple[str, ...]
    bucket_width: int
    positions: str | None = None
    seed: int = 1234
    chunk: int = 1024
    block_size: int | None = None
    threshold: float = 0.10
    model_entry: ModelEntry | None = None
    document_sources: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    skipped_documents: int = 0
    decompose: bool = False  # also fit the decomposition of every (scheme, document)
    # the in-distribution window pass (posgen.harness.length.window): stride S, None in
    # folders written before it existed (their reports show the old effective length only)
    window_stride: int | None = None

    def __post_init__(self) -> None:
        if self.max_length < 2 or self.trained_context < 2:
            raise ValueError("max_length and trained_context must be >= 2")
        if self.chunk < 1 or (self.block_size is not None and self.block_size < 1):
            raise ValueError("chunk and block size must be >= 1")
        if self.bucket_width < 1 or self.bucket_width > self.max_length:
            raise ValueError(f"bucket width must be in [1, {self.max_length}]")
        if not self.schemes or not self.documents:
            raise ValueError("give at least one scheme and one document")
        if not (self.threshold > 0 and math.isfinite(self.threshold)):
            raise ValueError(f"threshold must be a finite number > 0, got {self.threshold}")
        reference_buckets(self.bucket_width, self.n_buckets, self.trained_context)
        self._check_window()

    def _check_window(self) -> None:
        """A window stride needs tokens past C and ``1 ≤ S ≤ C/2`` (every scored token then
        has at least C/2 tokens of context, the reference range's own least)."""
        s, c = self.window_stride, self.trained_context
        if s is None:
            return
        if self.max_length <= c:
            raise ValueError(
                f"the in-distribution window (--window-stride) scores tokens past C = {c}: it "
                f"needs a max length > C, got {self.max_length}"
            )
        if isinstance(s, bool) or not isinstance(s, int) or not 1 <= s <= c // 2:
            raise ValueError(
                f"window stride (--window-stride) must be an integer in [1, C/2] = [1, {c // 2}], got {s}"
            )

    @property
    def n_buckets(self) -> int:
        return math.ceil(self.max_length / self.bucket_width)

    def parsed_schemes(self) -> list[LengthPerturbation]:
        return [parse_length(s) for s in self.schemes]

    def to_dict(self) -> dict[str, Any]:
        """The config as JSON; ``decompose`` only when set, so runs made before the flag
        existed keep their hash."""
        out: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self)}
        out.update(
            schemes=list(self.schemes),
            documents=list(self.documents),
            model_entry=self.model_entry.to_dict() if self.model_entry else {},
            document_sources={k: dict(v) for k, v in self.document_sources.items()},
        )
        if not self.decompose:
            del out["decompose"]
        if self.window_stride is None:
            del out["window_stride"]
        return out

    def scored_dict(self) -> dict[str, Any]:
        """:meth:`to_dict` without ``decompose`` and ``window_stride``: what the NLL and
        drift records depend on (and what names the default run folder, so a run made
        before the window pass keeps its folder and resumes there, adding the window)."""
        out = self.to_dict()
        out.pop("decompose", None)
        out.pop("window_stride", None)
        return out

    def default_folder(self) -> Path:
        """``posgen-runs/length/<model>_<12 hex of the scored config's SHA-256>`` (one
        folder with and without ``--decompose``)."""
        return RUNS_ROOT / "length" / f"{slug(self.model)}_{self.scored_hash()}"

    def earlier_default_folder(self) -> Path:
        """``posgen-runs/length-<hash>``: the default folder of releases before every
        command wrote under ``posgen-runs/<command>/``."""
        return RUNS_ROOT / f"length-{self.scored_hash()}"

    def scored_hash(self) -> str:
        """12 hex of the SHA-256 of the scored config (:meth:`scored_dict`)."""
        body = json.dumps(self.scored_dict(), sort_keys=True).encode()
        return hashlib.sha256(body).hexdigest()[:12]

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LengthConfig:
        """The config of a stored run (``config.json``'s ``config``)."""
        typed = ("schemes", "documents", "model_entry", "document_sources")
        plain = {f.name: d[f.name] for f in fields(cls) if f.name in d and f.name not in typed}
        entry = d.get("model_entry")
        return cls(
            **plain,
            schemes=tuple(d["schemes"]),
            documents=tuple(d["documents"]),
            model_entry=ModelEntry.from_dict(entry) if entry else None,
            document_sources={k: dict(v) for k, v in (d.get("document_sources") or {}).items()},
        )


def reference_buckets(width: int, n_buckets: int, trained_context: int) -> np.ndarray:
    """Indices of the buckets inside ``[C/2, C)``; raises if there are none."""
    starts = np.arange(n_buckets) * width
    inside = np.flatnonzero((starts >= trained_context // 2) & (starts + width <= trained_context))
    if inside.size == 0:
        raise ValueError(
            f"no position bucket of width {width} lies inside [C/2, C) = "
            f"[{trained_context // 2}, {trained_context}); use a smaller bucket width"
        )
    return inside


def scheme_folder(parent: Path, scheme: str) -> Path:
    """The folder of one scheme's records under ``parent`` (a length folder's ``docs/`` or
    ``decompose/``): the scheme's :func:`slug` with its name kept
    (``infllm_n_init_128_n_local_4096_…-<hash>``). Earlier releases kept the tail of a
    scheme longer than 48 characters (``_size_128_topk_16_…-<hash>``, the same hash):
    where such a folder exists and the new one does not, it is the scheme's folder, so
    their runs resume and re-report in place."""
    named = Path(parent) / slug(scheme, front=True)
    earlier = Path(parent) / slug(scheme)
    return earlier if earlier.is_dir() and not named.is_dir() else named


def read_length_config(folder: Path | str) -> LengthConfig:
    """The config of a length run folder; an unreadable one is a :class:`SchemaError`."""
    return LengthFolder.open(folder).config


class LengthFolder(CommandFolder):
    """The folder of one ``posgen length`` run (:mod:`posgen.results.folder.protocol`);
    its layout: :mod:`posgen.harness.length.runner`. Its cells are named by their path
    without ``.json`` (``docs/<scheme>/<document>``, ``window/<document>``)."""

    settings = CONFIG_FILE
    command = "length"

    config: LengthConfig

    @classmethod
    def open(cls, root: Path | str) -> LengthFolder:
        path = Path(root) / CONFIG_FILE
        refusal = folder_refusal(root, cls.command)
        if refusal is not None:  # none there, or not a length folder: say what it is
            raise SchemaError(refusal)
        data = read_json(path, "length run config")
        try:
            return cls(Path(root), LengthConfig.from_dict(data["config"]))
        except (KeyError, TypeError, ValueError) as e:
            raise SchemaError(f"{path}: not a readable length run config ({e!s:.200})") from None

    @classmethod
    def start(cls, root: Path | str, config: LengthConfig) -> LengthFolder:
        """Write ``config.json``, or check that the folder holds this very config (a rerun
        adding ``decompose``, or the window pass, to a run without it resumes there and
        records it; another window stride is refused: its window records would not
        match)."""
        root = Path(root)
        old = read_json(root / CONFIG_FILE, "length run config") if cls.is_own(root) else None
        if old is None:
            cls.check_not_foreign(root)
        else:
            config, note = legacy_resume(config, _stored_config(root), root)
        record = {"schema": LENGTH_SCHEMA, "config": config.to_dict()}
        record["config_sha256"] = config_hash(record["config"])
        if old is not None:
            if old.get("config_sha256") != record["config_sha256"]:
                _check_resumable(root, old, config)
            show(note)
            if old.get("config_sha256") == record["config_sha256"]:
                return cls(root, config)
        atomic_write_json(root / CONFIG_FILE, record)  # new, or with --decompose added
        return cls(root, config)

    def cell_path(self, cell: str) -> Path:
        return self.root / f"{cell}.json"

    def has_results(self) -> bool:
        return any((self.root / "docs").rglob("*.json"))


def _stored_config(root: Path) -> LengthConfig | None:
    """The folder's config, typed; None where it cannot be read (then compared as JSON)."""
    try:
        return LengthFolder.open(root).config
    except (SchemaError, RunConflictError):
        return None


def _check_resumable(root: Path, old: dict[str, Any], config: LengthConfig) -> None:
    """Refuse another config; a folder made with ``decompose`` run without it."""
    old_config = dict(old.get("config") or {})
    had_decompose = bool(old_config.pop("decompose", False))
    old_stride = old_config.pop("window_stride", None)
    if config_hash(old_config) != config_hash(config.scored_dict()) or old_stride not in (
        None,
        config.window_stride,
    ):
        raise RunConflictError(
            f"{root} holds a length run with another config "
            f"({describe_diff(old.get('config') or {}, config.to_dict())}); choose "
            "another --out"
        )
    if had_decompose:
        raise RunConflictError(
            f"{root} holds a length run with --decompose; rerun with --decompose "
            f"(it resumes) or choose another --out"
        )
