"""The one folder protocol every command that writes a folder follows.

``posgen run``, ``length``, ``decompose``, ``layers``, ``cause`` and ``ingest`` each write
one folder, and each does it the same way::

    with Folder.create(out, config) as folder:   # --out checked, lock taken, resume or refuse
        if not folder.has_cell(name):
            folder.write_cell(name, record)       # atomically: present means finished
    regenerate(folder.root)                       # scores and report, from the folder alone

:meth:`CommandFolder.create` checks that ``out`` can be written (:func:`check_writable`),
refuses a non-empty folder of something else before putting anything into it, takes the
folder's lock (:class:`~posgen.results.folder.lock.RunLock`: one writer, a second one is
refused at once), then starts the run or resumes it (:meth:`CommandFolder.start`: the
same settings resume, other settings are refused naming each one that differs; a folder
written before a local model was identified by content resumes with a note,
:mod:`~posgen.results.folder.model_identity`). A folder
that ``create`` made is removed again when the run fails before any cell finished, so a
failed first run leaves nothing behind. :meth:`CommandFolder.open` reads a folder back
with its settings typed (:attr:`CommandFolder.config`).

A command's folder is a subclass naming its ``settings`` file, ``kind``, ``schema``,
``command`` and how its config is stored (``config_dict`` / ``read_config``); one whose
settings file predates the protocol overrides :meth:`start` and :meth:`open` (``posgen
run``'s and ``posgen length``'s ``config.json``). What a folder is, is told from its
settings file (:mod:`posgen.results.folder.folder_kind`): an ``--out`` holding anything
else (another command's folder, a model folder) is refused naming what it holds.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, ClassVar, TypeVar

from posgen.results.folder.folder_kind import folder_refusal, tell_folder
from posgen.results.folder.lock import RunLock
from posgen.results.folder.model_identity import legacy_resume, show
from posgen.results.folder.schema import SchemaError
from posgen.results.folder.store import (
    RunConflictError,
    atomic_write_json,
    describe_diff,
    read_json,
)

F = TypeVar("F", bound="CommandFolder")


class OutFolderError(RunConflictError):
    """``--out`` names a place no folder can be written to."""


def check_writable(path: Path | str, flag: str = "--out") -> Path:
    """``path`` if a folder can be written there, else :class:`OutFolderError` saying why
    (a file, under a file, not writable). Nothing is left behind: a probe folder is made
    and removed."""
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise OutFolderError(f"{flag} {path}: is a file, not a folder; choose another {flag}")
    existing = path
    while not existing.exists() and existing.parent != existing:
        existing = existing.parent
    if not existing.is_dir():
        raise OutFolderError(
            f"{flag} {path}: {existing} is a file, so no folder can be made under it; "
            f"choose another {flag}"
        )
    try:  # os.access says yes to root even on a read-only file system: probe it
        if not os.access(existing, os.W_OK | os.X_OK):
            raise PermissionError("no write permission")
        os.rmdir(tempfile.mkdtemp(prefix=".posgen-probe-", dir=existing))
    except OSError as e:
        reason = e.strerror or str(e)
        raise OutFolderError(
            f"{flag} {path}: cannot write into {existing} ({reason}); choose another {flag}"
        ) from None
    return path


class CommandFolder:
    """A command's folder: settings file, one file per finished cell, outputs.

    ``Sub.create(root, config)`` (a context manager) to run; ``Sub.open(root)`` to read;
    ``Sub.start(root, config)`` starts or resumes without the lock (for a caller that
    holds it, and for building folders in tests)."""

    settings: ClassVar[str]
    kind: ClassVar[str]
    schema: ClassVar[int]
    command: ClassVar[str]
    cell_suffix: ClassVar[str] = ".json"

    def __init__(self, root: Path, config: Any) -> None:
        self.root, self.config = Path(root), config

    # settings ------------------------------------------------------------------------
    @staticmethod
    def config_dict(config: Any) -> dict[str, Any]:
        """The settings as stored."""
        return config.to_dict()

    @staticmethod
    def read_config(data: dict[str, Any]) -> Any:  # pragma: no cover - every kind overrides
        """The typed config of stored settings ``data``."""
        raise NotImplementedError

    @classmethod
    def is_own(cls, root: Path) -> bool:
        """True when ``root`` holds this command's settings file
        (:func:`~posgen.results.folder.folder_kind.tell_folder`)."""
        found = tell_folder(root)
        return found is not None and found.command == cls.command

    @classmethod
    def check_not_foreign(cls, root: Path) -> None:
        """Refuse a non-empty folder that is not this command's, saying what it is
        (another command's folder, a model folder, ...), before any file goes in."""
        found = tell_folder(root)
        if found is not None and found.command != cls.command:
            raise RunConflictError(
                f"{root} exists, is not empty and is not a posgen {cls.command} folder: "
                f"it is {found.what}; choose another --out"
            )

    @classmethod
    def start(cls: type[F], root: Path | str, config: Any) -> F:
        """Start a run with ``config``, or resume the one the folder holds when its settings
        are the same; refuse other settings (naming each one that differs)."""
        root = Path(root)
        if cls.is_own(root):
            old = cls.open(root)
            config, note = legacy_resume(config, old.config, root)
            new = json.loads(json.dumps(cls.config_dict(config), sort_keys=True))
            stored = json.loads(json.dumps(cls.config_dict(old.config), sort_keys=True))
            if stored != new:
                raise RunConflictError(
                    f"{root} holds a {cls.command} run with other settings "
                    f"({describe_diff(stored, new)}); nothing was overwritten: use another "
                    "--out, or the same settings to resume"
                )
            show(note)
            return old
        new = json.loads(json.dumps(cls.config_dict(config), sort_keys=True))
        cls.check_not_foreign(root)
        atomic_write_json(
            root / cls.settings, {"kind": cls.kind, "schema": cls.schema, "config": new}
        )
        return cls(root, cls.read_config(new))

    @classmethod
    def open(cls: type[F], root: Path | str) -> F:
        """The folder at ``root`` with its settings typed; :class:`SchemaError` when it is
        not this command's folder (saying what it is) or its settings cannot be read."""
        root = Path(root)
        refusal = folder_refusal(root, cls.command)
        if refusal is not None:
            raise SchemaError(refusal)
        data = read_json(root / cls.settings, f"{cls.command} run settings")
        if data.get("schema") != cls.schema:
            raise SchemaError(
                f"{root / cls.settings} has schema {data.get('schema')!r}, but this posgen "
                f"reads schema {cls.schema} of a {cls.command} folder; rerun posgen "
                f"{cls.command} with this posgen into a new --out"
            )
        try:
            config = cls.read_config(data["config"])
        except (KeyError, TypeError, ValueError) as e:
            raise SchemaError(
                f"{root / cls.settings}: not a readable {cls.command} run config ({e!s:.200})"
            ) from None
        return cls(root, config)

    @classmethod
    @contextlib.contextmanager
    def create(
        cls: type[F],
        root: Path | str,
        config: Any,
        note: Callable[[str], None] | None = None,
    ) -> Iterator[F]:
        """Hold the folder at ``root`` for a run of ``config``: ``--out`` checked, a foreign
        folder refused, the lock taken, the run started or resumed (:meth:`start`). A
        folder this made is removed again if the run fails before any cell finished.
        ``note`` hears of temporary files a killed run left (removed under the lock)."""
        root = check_writable(root)
        cls.check_not_foreign(root)
        with RunLock(root) as lock:
            if lock.removed and note is not None:
                note(f"removed {len(lock.removed)} temporary file(s) left by an interrupted run")
            folder = None
            try:
                try:
                    folder = cls.start(root, config)
                except SchemaError as e:  # its settings cannot be read: not resumed
                    raise RunConflictError(
                        f"{e} (nothing was overwritten; choose another --out)"
                    ) from None
                yield folder
            except BaseException:
                if lock.created and (folder is None or not folder.has_results()):
                    shutil.rmtree(root, ignore_errors=True)
                raise

    # cells ---------------------------------------------------------------------------
    def cell_path(self, cell: str) -> Path:
        return self.root / "cells" / f"{cell}{self.cell_suffix}"

    def has_cell(self, cell: str) -> bool:
        """True when the cell finished (its file is written last, atomically)."""
        return self.cell_path(cell).is_file()

    def write_cell(self, cell: str, record: dict[str, Any]) -> None:
        atomic_write_json(self.cell_path(cell), record)

    def read_cell(self, cell: str) -> dict[str, Any]:
        return read_json(self.cell_path(cell), f"{self.command} cell {cell}")

    def link(self, name: str, given: Path | None) -> Path | None:
        """Another folder this run's report relates to (``--length-run``, ``--layers-run``):
        ``given`` (then remembered in ``<name>.json``), else the one remembered by an
        earlier run of this folder, else None."""
        path = self.root / f"{name}.json"
        if given is not None:
            atomic_write_json(path, {"path": str(Path(given).resolve())})
            return Path(given)
        if path.is_file():
            return Path(read_json(path, f"{self.command} run's {name} link")["path"])
        return None

    def has_results(self) -> bool:
        """True when any cell finished."""
        return any((self.root / "cells").rglob(f"*{self.cell_suffix}"))
