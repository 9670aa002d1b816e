"""One writer per run folder: an exclusive lock held while ``posgen run`` writes it.

The lock is ``RUN/.posgen.lock``, held with ``fcntl.flock`` (POSIX): the operating system
releases it when the process ends, however it ends, so a killed run leaves no stale lock.
A second ``posgen run`` into a locked folder is refused at once (it does not wait) with a
message naming the process that holds it. The holder then removes the temporary files
and folders that a killed run's atomic writes may have left behind (``.NAME.*.tmp``,
see :mod:`posgen.atomic`): nobody else writes there while the lock is held.
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from types import TracebackType

LOCK_FILE = ".posgen.lock"


class RunLockedError(RuntimeError):
    """Another process is writing the run folder."""


def stale_temporary_files(root: Path) -> list[Path]:
    """Temporary files and folders of interrupted atomic writes anywhere under ``root``
    (not what lies inside such a folder)."""
    found = sorted(Path(root).rglob(".*.tmp"))
    return [p for p in found if not any(q in p.parents for q in found)]


class RunLock:
    """``with RunLock(root): ...`` holds the run folder's lock (creating the folder)."""

    def __init__(self, root: Path | str) -> None:
        self.root = Path(root)
        self._fd: int | None = None
        self.removed: list[Path] = []
        self.created = False  # True when this lock made the folder

    def __enter__(self) -> RunLock:
        import fcntl

        self.created = not self.root.exists()
        self.root.mkdir(parents=True, exist_ok=True)
        fd = os.open(self.root / LOCK_FILE, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.pread(fd, 64, 0).decode("ascii", "replace").strip() or "unknown"
            os.close(fd)
            raise RunLockedError(
                f"{self.root} is being written by another posgen run (pid {holder}); "
                "wait for it to finish, or use another --out folder"
            ) from None
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode("ascii"), 0)
        self._fd = fd
        self.removed = stale_temporary_files(self.root)
        for path in self.removed:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if self._fd is not None:
            os.close(self._fd)  # releases the lock; the file stays (harmless, empty of meaning)
            self._fd = None
