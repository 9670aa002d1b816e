"""The folder of one ``posgen layers`` run: its settings, one file per cell, its outputs.

``layers.json`` holds the settings; a rerun with the same settings resumes (cells already
written are kept), other settings are refused before anything is written, and so is a
non-empty folder that is not a layers run. Every file is written atomically, and a lock
(:class:`posgen.results.folder.lock.RunLock`) keeps two runs out of one folder.

Layout::

    layers.json                   settings (kind, schema, config)
    cells/<cell>.json             per-document log-likelihoods of one cell
    decomposition.parquet         the decomposition's per-(doc, layer, head) table
    layer_profile.csv, layer_relation.csv, layers_scores.json, layers.md, layers.png
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from posgen.results.folder.store import RunConflictError, atomic_write_json, read_json

SETTINGS = "layers.json"
KIND = "posgen-layers"
SCHEMA = 1


class LayersFolder:
    """``LayersFolder.create(root, config)`` to start or resume; ``.open(root)`` to read.

    A subclass is the folder of another command with the same shape (settings file, one
    file per cell): it names its ``settings`` file, ``kind``, ``schema`` and ``command``."""

    settings: str = SETTINGS
    kind: str = KIND
    schema: int = SCHEMA
    command: str = "layers"

    def __init__(self, root: Path, config: dict[str, Any]) -> None:
        self.root, self.config = Path(root), config

    @classmethod
    def create(cls, root: Path | str, config: dict[str, Any]) -> LayersFolder:
        root = Path(root)
        config = json.loads(json.dumps(config, sort_keys=True))
        path = root / cls.settings
        if path.exists():
            old = cls.open(root)
            if old.config != config:
                changed = sorted(
                    k for k in set(old.config) | set(config) if old.config.get(k) != config.get(k)
                )
                raise RunConflictError(
                    f"{root} holds a {cls.command} run with other settings "
                    f"({', '.join(changed)}); "
                    "nothing was overwritten: use another --out, or the same settings to resume"
                )
            return old
        if root.exists() and any(not p.name.startswith(".") for p in root.iterdir()):
            raise RunConflictError(
                f"{root} exists, is not empty and is not a posgen {cls.command} folder; "
                "choose another --out"
            )
        atomic_write_json(path, {"kind": cls.kind, "schema": cls.schema, "config": config})
        return cls(root, config)

    @classmethod
    def open(cls, root: Path | str) -> LayersFolder:
        root = Path(root)
        data = read_json(root / cls.settings, f"{cls.command} run settings")
        if data.get("kind") != cls.kind or data.get("schema") != cls.schema:
            raise RunConflictError(
                f"{root / cls.settings} is not a posgen {cls.command} run (schema {cls.schema})"
            )
        return cls(root, data["config"])

    def cell_path(self, cell: str) -> Path:
        return self.root / "cells" / f"{cell}.json"

    def has_cell(self, cell: str) -> bool:
        return self.cell_path(cell).is_file()

    def write_cell(self, cell: str, record: dict[str, Any]) -> None:
        atomic_write_json(self.cell_path(cell), record)

    def read_cell(self, cell: str) -> dict[str, Any]:
        return read_json(self.cell_path(cell), f"{self.command} cell {cell}")

    @property
    def decomposition_path(self) -> Path:
        return self.root / "decomposition.parquet"
