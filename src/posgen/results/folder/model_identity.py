"""Folders written before posgen identified a local model by its files' content.

A local model folder's revision is ``local-content:<16 hex>``, of its weights, config and
tokenizer files' content (:mod:`posgen.harness.loading.identity`); earlier releases
recorded ``local:<12 hex>``, of config.json and the weight files' names and sizes only.
A folder such a release wrote is resumed where the model's legacy
revision (:attr:`~posgen.results.folder.config.ModelEntry.legacy_revision`, computed
again now) is the one recorded: the run goes on under the recorded revision, and one
note says that a change of the weights since then that kept their sizes cannot be
detected. Refusing instead would throw away every finished cell of a run interrupted
across an upgrade, while the check the folder was written under (config, names,
sizes) still holds; the note says what to do where the weights may have changed.
Where the legacy revision differs too, nothing is adopted and the folder is refused as
any other setting that differs; a run folder with nothing finished yet takes the new
revision (:meth:`~posgen.results.folder.run_store.RunStore.start`).
"""

from __future__ import annotations

import logging
from dataclasses import fields, is_dataclass, replace
from pathlib import Path
from typing import Any, TypeVar

from posgen.results.folder.config import ModelEntry

log = logging.getLogger(__name__)

LEGACY_PREFIX = "local:"

C = TypeVar("C")


def legacy_resume(config: C, stored: Any, root: Path) -> tuple[C, str | None]:
    """``config`` with each model entry given the legacy revision its stored twin in
    ``stored`` (the folder's typed settings) recorded, where that is this model's legacy
    revision; and the note to show when the folder then resumes (None: nothing adopted)."""
    if type(config) is not type(stored) or not is_dataclass(config):
        return config, None
    changes: dict[str, Any] = {}
    adopted: list[ModelEntry] = []
    for f in fields(config):
        value, old = getattr(config, f.name), getattr(stored, f.name)
        if isinstance(value, ModelEntry):
            new = _adopt(value, old)
        elif _entries(value) and _entries(old) and len(old) == len(value):
            new = tuple(_adopt(a, b) for a, b in zip(value, old, strict=True))
        else:
            continue
        if new != value:
            changes[f.name] = new
            before = value if isinstance(value, tuple) else (value,)
            after = new if isinstance(new, tuple) else (new,)
            adopted += [b for a, b in zip(before, after, strict=True) if a != b]
    if not adopted:
        return config, None
    return replace(config, **changes), _note(root, adopted)


def _entries(value: Any) -> bool:
    return (
        isinstance(value, tuple) and bool(value) and all(isinstance(e, ModelEntry) for e in value)
    )


def _adopt(entry: ModelEntry, old: Any) -> ModelEntry:
    if (
        isinstance(old, ModelEntry)
        and entry.legacy_revision is not None
        and isinstance(old.revision, str)
        and old.revision.startswith(LEGACY_PREFIX)
        and old.revision == entry.legacy_revision
        and entry.revision != old.revision
    ):
        return replace(entry, revision=old.revision)
    return entry


def _note(root: Path, adopted: list[ModelEntry]) -> str:
    named = ", ".join(f"{e.label} ({e.revision})" for e in adopted)
    return (
        f"{root} was written before posgen identified a local model by its files' content: "
        f"resuming it under the revision it recorded for {named}, from config.json and the "
        "weight files' names and sizes, so a change of the weights since then that kept "
        "their sizes cannot be detected; if they may have changed, rerun into another --out"
    )


def show(note: str | None) -> None:
    """The note of :func:`legacy_resume`, on the ``posgen`` logger, when it resumes."""
    if note:
        log.warning(note)
