"""An output folder checked before any work: it must be a folder posgen can create or
write into (not a file, not under a file, not read-only)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from posgen.harness.input_error import InputError


def check_out_folder(path: Path | str, flag: str = "--out") -> Path:
    """``path`` if a run can write its folder there, else :class:`InputError` saying why.
    Nothing is left behind (a probe folder is made and removed)."""
    path = Path(path).expanduser()
    if path.exists() and not path.is_dir():
        raise InputError(f"{flag} {path}: is a file, not a folder; choose another {flag}")
    existing = path
    while not existing.exists():
        if existing.parent == existing:
            break
        existing = existing.parent
    if not existing.is_dir():
        raise InputError(
            f"{flag} {path}: {existing} is a file, so no folder can be made under it; "
            f"choose another {flag}"
        )
    try:  # os.access says yes to root even on a read-only file system: probe it
        if not os.access(existing, os.W_OK | os.X_OK):
            raise PermissionError("no write permission")
        os.rmdir(tempfile.mkdtemp(prefix=".posgen-probe-", dir=existing))
    except OSError as e:
        reason = e.strerror or str(e)
        raise InputError(
            f"{flag} {path}: cannot write into {existing} ({reason}); choose another {flag}"
        ) from None
    return path
