"""An output folder checked before any work: it must be a folder posgen can create or
write into (not a file, not under a file, not read-only). The check is the folder
protocol's (:func:`posgen.results.folder.protocol.check_writable`), run early so that a
bad ``--out`` is refused before any model's config is read."""

from __future__ import annotations

from pathlib import Path

from posgen.harness.input_error import InputError
from posgen.results.folder.protocol import OutFolderError, check_writable


def check_out_folder(path: Path | str, flag: str = "--out") -> Path:
    """``path`` if a run can write its folder there, else :class:`InputError` saying why.
    Nothing is left behind (a probe folder is made and removed)."""
    try:
        return check_writable(path, flag)
    except OutFolderError as e:
        raise InputError(str(e)) from None
