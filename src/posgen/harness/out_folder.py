"""An output folder checked before any work: it must be a folder posgen can create or
write into (not a file, not under a file, not read-only) and, given the command's folder
class, one that holds nothing else (another command's folder, a model folder). The checks
are the folder protocol's (:func:`posgen.results.folder.protocol.check_writable`,
:meth:`~posgen.results.folder.protocol.CommandFolder.check_not_foreign`), run early so
that a bad ``--out`` is refused before any model's config is read."""

from __future__ import annotations

from pathlib import Path

from posgen.harness.input_error import InputError
from posgen.results.folder.protocol import CommandFolder, check_writable
from posgen.results.folder.store import RunConflictError


def check_out_folder(
    path: Path | str, flag: str = "--out", folder: type[CommandFolder] | None = None
) -> Path:
    """``path`` if a run can write its folder there (with ``folder``: and it is empty or
    that command's folder), else :class:`InputError` saying why. Nothing is left behind
    (a probe folder is made and removed)."""
    try:
        path = check_writable(path, flag)
        if folder is not None:
            folder.check_not_foreign(path)
    except RunConflictError as e:  # OutFolderError among them
        raise InputError(str(e)) from None
    return path
