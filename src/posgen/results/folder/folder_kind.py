"""What a folder holds, told from its settings file (:func:`tell_folder`): which posgen
command wrote it, or what else it is.

Each command that writes a folder keeps its settings in one file: ``config.json`` for
``posgen run`` and ``posgen ingest`` (a run folder: ``schema_version`` and
``config_hash``) and for ``posgen length`` (``schema`` and ``config_sha256``),
``decompose.json``, ``layers.json`` and ``cause.json`` (each naming its ``kind``). A
file of that name that holds anything else is not posgen's: a model folder's
``config.json`` (a Hugging Face model config), other JSON, or no JSON at all.

Every command that takes a folder tells it here, so each says the same about what it was
given: ``posgen report`` picks the folder's command; a writing command refuses an
``--out`` that holds something else (:meth:`~posgen.results.folder.protocol.CommandFolder.check_not_foreign`);
``open`` of a command's folder, ``posgen baseline``, ``check`` and ``compare`` name the
folder they were handed and the one they take (:func:`folder_refusal`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from posgen.results.folder.schema import SchemaError

# each command's settings file; the protocol's name their kind (``posgen-<command>``)
SETTINGS_FILES = {
    "cause.json": "cause",
    "layers.json": "layers",
    "decompose.json": "decompose",
    "config.json": None,  # run or length, told by its fields
}
WRITTEN_BY = {
    "run": "posgen run or posgen ingest",
    "length": "posgen length",
    "decompose": "posgen decompose",
    "layers": "posgen layers",
    "cause": "posgen cause",
}


@dataclass(frozen=True)
class FolderKind:
    """What a folder is: ``command`` the posgen command whose folder it is (``run`` for
    ``posgen run`` and ``posgen ingest``), None when it is not a posgen folder; ``what``
    it is, in words; ``run`` the run folder a length folder belongs to (``posgen run
    --length`` writes ``RUN/length/<model>/``), else None."""

    command: str | None
    what: str
    run: Path | None = None


def has_visible_files(root: Path) -> bool:
    """True when ``root`` holds anything but dot files (the lock, interrupted writes)."""
    return root.is_dir() and any(not p.name.startswith(".") for p in root.iterdir())


def folder_words(command: str) -> str:
    """``a posgen <command> folder (written by ...)``."""
    return f"a posgen {command} folder (written by {WRITTEN_BY[command]})"


def tell_folder(root: Path | str) -> FolderKind | None:
    """What the folder at ``root`` is; None when there is nothing there (no folder, or
    only dot files). A settings file that is posgen's decides; else the first one that is
    not says what the folder is."""
    root = Path(root)
    if not has_visible_files(root):
        return None
    foreign = None
    for name in SETTINGS_FILES:
        if (root / name).is_file():
            command, what = _tell_settings(root / name)
            if command is not None:
                return _posgen_folder(root, command)
            foreign = foreign or what
    if foreign is not None:
        return FolderKind(None, foreign)
    if (root / "adapter_config.json").is_file():
        return FolderKind(None, "a PEFT adapter folder (adapter_config.json)")
    return FolderKind(None, f"a folder of other files (no {_settings_list()})")


def folder_refusal(root: Path | str, command: str, reader: str | None = None) -> str | None:
    """None when ``root`` is ``command``'s folder; else why it is not, in one line: what
    it is and (with ``reader``, e.g. ``posgen baseline``) what ``reader`` takes."""
    root = Path(root)
    found = tell_folder(root)
    if found is not None and found.command == command:
        return None
    if not root.is_dir():
        return f"{command} folder not found: {root}"
    what = "an empty folder" if found is None else found.what
    if reader is None:
        return f"{root} is {what}, not {folder_words(command)}"
    return f"{root} is {what}; {reader} takes {folder_words(command)}{_hint(found, command)}"


def require_folder(root: Path | str, command: str, reader: str) -> None:
    """Refuse a folder that is not ``command``'s with :class:`SchemaError` saying what it is
    and what ``reader`` takes (:func:`folder_refusal`)."""
    refusal = folder_refusal(root, command, reader)
    if refusal is not None:
        raise SchemaError(refusal)


def not_posgen(root: Path | str, reader: str) -> str:
    """Why ``root`` is no posgen folder ``reader`` can read (it holds none of the settings
    files, or one that is not posgen's)."""
    found = tell_folder(root)
    what = "an empty folder" if found is None else found.what
    return (
        f"{root} is not a posgen folder: it is {what}; {reader} takes a folder written by "
        "posgen run, ingest, length, decompose, layers or cause"
    )


def _hint(found: FolderKind | None, command: str) -> str:
    """What to give instead: a length folder's run folder (a run's readers read its length
    runs as part of it)."""
    if found is None or found.command != "length" or command != "run":
        return ""
    if found.run is not None:
        return f": give {found.run}, the run folder it belongs to"
    return ", and reads a length run only as part of one (posgen run --length writes RUN/length/<model>/)"


def _posgen_folder(root: Path, command: str) -> FolderKind:
    """A posgen folder; a length folder under ``RUN/length/`` names its run."""
    if command == "length" and root.parent.name == "length":
        run = root.parent.parent
        found = tell_folder(run)
        if found is not None and found.command == "run":
            what = f"the length folder of the run folder {run} (written by posgen run --length)"
            return FolderKind("length", what, run)
    return FolderKind(command, folder_words(command))


def _tell_settings(path: Path) -> tuple[str | None, str]:
    """``(command, "")`` when ``path`` is a posgen command's settings, else
    ``(None, what the folder is)``."""
    not_ours = f"a folder whose {path.name} is not posgen's"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        return None, f"{not_ours} (not valid JSON: {e})"
    except OSError as e:
        return None, f"{not_ours} (it cannot be read: {e.strerror or e})"
    if not isinstance(data, dict):
        return None, f"{not_ours} (not a JSON object)"
    command = SETTINGS_FILES[path.name]
    if command is not None:
        if data.get("kind") == f"posgen-{command}":
            return command, ""
        kind = data.get("kind")
        found = "no kind" if kind is None else f"kind {kind!r}"
        return None, f"{not_ours} ({found}, not 'posgen-{command}')"
    if "config_hash" in data or "schema_version" in data:
        return "run", ""
    if "config_sha256" in data:
        return "length", ""
    model_type = data.get("model_type")
    if isinstance(model_type, str) or "architectures" in data:
        typed = f", model_type {model_type}" if isinstance(model_type, str) else ""
        return None, f"a model folder (its config.json is a Hugging Face model config{typed})"
    return None, f"{not_ours} (neither a run's settings nor a length run's)"


def _settings_list() -> str:
    names = list(SETTINGS_FILES)
    return ", ".join(names[:-1]) + f" or {names[-1]}"
