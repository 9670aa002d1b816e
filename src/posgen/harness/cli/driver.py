"""The shape every command that writes a folder follows, read top to bottom in its cli
module: resolve (arguments and the model's config, no weights) → create (the folder
protocol: ``--out`` checked, locked, resumed or refused) → run (its cells) → regenerate
(the report, from the folder alone). Each step's refusal is one line, exit 2."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from posgen.harness.input_error import InputError


def say(command: str) -> Callable[[str], None]:
    """``line -> None``: ``posgen COMMAND: line`` on stderr (notes, progress, refusals)."""

    def out(line: str) -> None:
        print(f"posgen {command}: {line}", file=sys.stderr, flush=True)

    return out


def resolved(command: str, resolve: Callable[[], Any], refused: tuple[type, ...] = ()) -> Any:
    """``resolve()``'s settings, or None after its refusal in one line (an
    :class:`InputError` or one of ``refused``)."""
    try:
        return resolve()
    except (InputError, *refused) as e:
        say(command)(str(e))
        return None


def default_out(command: str, label: str, *earlier_roots: str) -> Path:
    """``posgen-runs/<command>/<slug of label>``, or the folder an earlier release named
    by default under one of ``earlier_roots`` where only that exists."""
    from posgen.results.folder.store import default_folder, slug

    name = slug(label)
    return default_folder(command, name, *(Path(root) / name for root in earlier_roots))


def write_folder(
    command: str,
    folder_class: Any,
    out: Path,
    config: Any,
    run: Callable[[Any], Any],
    regenerate: Callable[[Any], Any],
    refused: tuple[type, ...] = (),
) -> tuple[Any, Any, Any] | None:
    """create → run → regenerate: ``(folder, run's result, regenerate's result)``, or None
    after a refusal in one line (another config in ``out``, another writer, or one of
    ``refused``)."""
    from posgen.results.folder.lock import RunLockedError
    from posgen.results.folder.store import RunConflictError

    try:
        with folder_class.create(out, config, note=say(command)) as folder:
            result = run(folder)
            made = regenerate(folder)
    except (RunConflictError, RunLockedError, *refused) as e:
        say(command)(str(e))
        return None
    return folder, result, made
