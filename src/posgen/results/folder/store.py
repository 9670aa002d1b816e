"""The files of a posgen folder: atomic JSON and Parquet writes, reads that turn a missing
or corrupt file into a clear error, file-name-safe names, the refusal of a conflicting
rerun (:class:`RunConflictError`, naming each setting that differs), and the check of a
``posgen run`` cell record. The run folder itself: :mod:`posgen.results.folder.run_store`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from posgen.atomic import atomic_write, atomic_write_text
from posgen.results.folder.schema import SchemaError


class RunConflictError(RuntimeError):
    """The run folder holds results of a different config."""


def atomic_write_json(path: Path, obj: Any) -> None:
    """Pretty, sorted JSON (non-finite floats written as null by the caller)."""
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=True, default=json_default) + "\n")


def atomic_write_parquet(path: Path, df) -> None:
    atomic_write(path, lambda tmp: df.to_parquet(tmp, index=False))


def json_default(obj: Any) -> Any:
    try:
        from lm_eval.utils import handle_non_serializable
    except ImportError:  # pragma: no cover - lm-eval is a dependency
        return str(obj)
    return handle_non_serializable(obj)


def slug(text: str, *, front: bool = False) -> str:
    """A file-name-safe, collision-free name of at most 57 characters: a readable part of
    ``text`` + ``-`` + 8 hex of its SHA-256. The readable part is the last 48 safe
    characters (a label's or a path's tail names it), with ``front`` the first 48 (a
    scheme's name leads: ``infllm_n_init_128_n_local_4096_…``)."""
    safe = re.sub(r"[^A-Za-z0-9._-]+", "_", text.strip("/")).strip("._")
    readable = (safe[:48] if front else safe[-48:]) or "x"
    return f"{readable}-{hashlib.sha256(text.encode('utf-8')).hexdigest()[:8]}"


#: where every command writes its folder when not given ``--out``
RUNS_ROOT = Path("posgen-runs")


def default_folder(command: str, name: str, *earlier: Path) -> Path:
    """Every command's default folder, ``posgen-runs/<command>/<name>`` (relative to the
    working directory). Where it does not exist but one of ``earlier`` does (the folder an
    earlier release named by default: ``posgen-runs/<name>`` for a run, ``posgen-layers/``,
    ``posgen-cause/``, ``posgen-runs/length-<hash>``), that one: a rerun without ``--out``
    resumes and re-reports the folder it wrote before."""
    folder = RUNS_ROOT / command / name
    if folder.exists():
        return folder
    return next((path for path in earlier if path.exists()), folder)


def read_json(path: Path, what: str) -> dict[str, Any]:
    """Load a JSON object, turning a missing or corrupt file into a clear error."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise SchemaError(f"{what} not found: {path}") from None
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise SchemaError(f"{what} is not valid JSON ({path}): {e}") from None
    if not isinstance(data, dict):
        raise SchemaError(f"{what} must hold a JSON object: {path}")
    return data


def read_parquet(path: Path):
    """A Parquet table, or :class:`SchemaError` naming the file when it cannot be read
    (truncated, not Parquet, unreadable)."""
    import pandas as pd

    try:
        return pd.read_parquet(path)
    except (OSError, ValueError, TypeError) as e:  # pyarrow's errors derive from these
        raise SchemaError(f"{path} is unreadable ({type(e).__name__}: {e!s:.120})") from None


CELL_SECTIONS = {
    "cell": Mapping,
    "model_info": Mapping,
    "metric_list": list,
    "metrics": Mapping,
    "docs": Mapping,
}
CELL_FIELDS = ("task", "lm_eval_task", "kind", "scheme", "rate", "seed")


def check_cell_record(data: Mapping[str, Any], path: Path) -> None:
    """Refuse a cell record that lacks a section or holds a non-numeric per-document
    value (:class:`SchemaError` naming ``path``): scoring it would crash or mislead."""
    import math

    def bad(why: str) -> SchemaError:
        return SchemaError(
            f"{path} is corrupt: {why}; delete it and rerun `posgen run` (it resumes)"
        )

    for key, kind in CELL_SECTIONS.items():
        if not isinstance(data.get(key), kind):
            raise bad(f"{key!r} is missing or not an object")
    missing = [k for k in CELL_FIELDS if data["cell"].get(k) is None]
    if missing or "model" not in data:
        raise bad(f"missing {missing or ['model']}")
    for metric, slot in data["docs"].items():
        if isinstance(slot, Mapping) and "items" in slot:  # a corpus metric's logged items
            lists = [slot.get("keys"), slot["items"]]
            if not all(isinstance(x, list) for x in lists) or len({len(x) for x in lists}) != 1:
                raise bad(f"docs.{metric} needs lists keys and items of one length")
            continue
        lists = [slot.get(k) if isinstance(slot, Mapping) else None for k in ("keys", "num", "den")]
        if not all(isinstance(x, list) for x in lists) or len({len(x) for x in lists}) != 1:
            raise bad(f"docs.{metric} needs lists keys, num and den of one length")
        for field, values in zip(("num", "den"), lists[1:], strict=True):
            for i, v in enumerate(values):
                if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v):
                    raise bad(f"docs.{metric}.{field}[{i}] is {v!r}, not a finite number")
                if field == "den" and v <= 0:
                    raise bad(f"docs.{metric}.den[{i}] is {v!r}; a document's weight is > 0")


def describe_diff(old: Mapping[str, Any], new: Mapping[str, Any]) -> str:
    """``setting: old -> new`` for every leaf setting that differs (dotted paths), the
    first :data:`SHOWN` in full and the others named. Nothing is cut: a value whose
    ``old -> new`` is longer than :data:`LONG` characters shows what differs in it (a
    list: the items changed, removed or added; a string: the span that differs)."""
    diffs = _leaf_diffs(old, new, "")
    parts = [_change(k, a, b) for k, a, b in diffs[:SHOWN]]
    rest = [k for k, _, _ in diffs[SHOWN:]]
    more = f"; and {len(rest)} more: {', '.join(rest)}" if rest else ""
    return "; ".join(parts) + more


_ABSENT = "(absent)"
SHOWN = 4  # differing settings shown with their values
LONG = 120  # characters of ``setting: old -> new`` past which only what differs is shown
CONTEXT = 20  # characters kept either side of the span where two long strings differ


def _leaf_diffs(old: Any, new: Any, where: str) -> list[tuple[str, Any, Any]]:
    if isinstance(old, Mapping) and isinstance(new, Mapping):
        out = []
        for k in sorted(set(old) | set(new)):
            key = f"{where}.{k}" if where else str(k)
            out += _leaf_diffs(old.get(k, _ABSENT), new.get(k, _ABSENT), key)
        return out
    lists = isinstance(old, list) and isinstance(new, list) and len(old) == len(new)
    if lists and all(isinstance(x, Mapping) for x in old + new):  # models: item by item
        pairs = enumerate(zip(old, new, strict=True))
        return [d for i, (a, b) in pairs for d in _leaf_diffs(a, b, f"{where}[{i}]")]
    return [] if old == new else [(where, old, new)]


def _change(key: str, old: Any, new: Any) -> str:
    """``key: old -> new``, or for a long pair what differs in it."""
    text = f"{key}: {old!r} -> {new!r}"
    if len(text) <= LONG:
        return text
    if isinstance(old, list) and isinstance(new, list):
        return _list_change(key, old, new) or text
    if isinstance(old, str) and isinstance(new, str):
        return f"{key}: {_string_change(old, new)}"
    return text  # another pair of types: whole


def _list_change(key: str, old: list, new: list) -> str | None:
    """The items that differ: by index in lists of one length, else those removed and
    added (None when neither says it: the same items, counted otherwise)."""
    if len(old) == len(new):
        pairs = [(i, a, b) for i, (a, b) in enumerate(zip(old, new, strict=True)) if a != b]
        return "; ".join(_change(f"{key}[{i}]", a, b) for i, a, b in pairs)
    removed = [x for x in old if x not in new]
    added = [x for x in new if x not in old]
    if not (removed or added):
        return None
    said = [f"removed {removed!r}"] * bool(removed) + [f"added {added!r}"] * bool(added)
    return f"{key}: {len(old)} -> {len(new)} items, " + " and ".join(said)


def _string_change(old: str, new: str) -> str:
    """Where two strings differ: from the first differing character to the last, with
    :data:`CONTEXT` characters either side (``...`` where the rest is the same)."""
    start = next(
        (i for i, (a, b) in enumerate(zip(old, new, strict=False)) if a != b),
        min(len(old), len(new)),
    )
    tail = 0
    while tail < min(len(old), len(new)) - start and old[-1 - tail] == new[-1 - tail]:
        tail += 1

    def excerpt(text: str) -> str:
        lo, hi = max(0, start - CONTEXT), min(len(text), len(text) - tail + CONTEXT)
        return f"{'...' * (lo > 0)}{text[lo:hi]!r}{'...' * (hi < len(text))}"

    return f"from character {start}: {excerpt(old)} -> {excerpt(new)}"
