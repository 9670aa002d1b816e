"""Atomic file writes: a reader sees the old file or the whole new one, never half of one.

The one implementation every part of posgen writes its outputs through (run folders,
decomposition tables and plots, the shipped data and task files).
"""

from __future__ import annotations

import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

_UMASK = os.umask(0o022)
os.umask(_UMASK)


def atomic_write(path: Path | str, write: Callable[[str], object]) -> None:
    """Call ``write(tmp)`` on a temporary file beside ``path``, then ``os.replace`` it onto
    ``path``: readers see the old file or the whole new one, never a half-written one. The
    file gets the usual mode (0666 less the umask; ``mkstemp`` alone would give 0600). On
    any error the temporary file is removed and the error re-raised."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        os.chmod(tmp, 0o666 & ~_UMASK)
        write(tmp)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def atomic_write_bytes(path: Path | str, data: bytes) -> None:
    """Write ``data`` to ``path`` atomically (:func:`atomic_write`)."""
    atomic_write(path, lambda tmp: Path(tmp).write_bytes(data))


def atomic_write_text(path: Path, text: str) -> None:
    atomic_write_bytes(path, text.encode("utf-8"))


def atomic_write_folder(path: Path | str, write: Callable[[str], object]) -> None:
    """Call ``write(tmp)`` on a temporary folder beside ``path``, then rename it to
    ``path``: readers see no folder or the whole new one. A folder already at ``path``
    (left by an interrupted write of the same thing) is removed first. On any error the
    temporary folder is removed and the error re-raised."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = tempfile.mkdtemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        os.chmod(tmp, 0o777 & ~_UMASK)
        write(tmp)
        for folder, _, files in os.walk(tmp):
            for name in files:
                with open(os.path.join(folder, name), "rb+") as f:
                    os.fsync(f.fileno())
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
