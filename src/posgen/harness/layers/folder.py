"""The folder of one ``posgen layers`` run: its settings, one file per cell, its outputs.

``layers.json`` holds the settings (a
:class:`~posgen.results.folder.layers_config.LayersConfig`); a rerun with the same settings
resumes (cells already written are kept), other settings are refused before anything is
written (naming each setting that differs), and so is a non-empty folder that is not a
layers run. Every file is written atomically, and a lock
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

from posgen.results.folder.layers_config import LayersConfig
from posgen.results.folder.schema import SchemaError
from posgen.results.folder.store import (
    RunConflictError,
    atomic_write_json,
    describe_diff,
    read_json,
)

SETTINGS = "layers.json"
KIND = "posgen-layers"
SCHEMA = 1


class LayersFolder:
    """``LayersFolder.create(root, config)`` to start or resume; ``.open(root)`` to read."""

    def __init__(self, root: Path, config: LayersConfig) -> None:
        self.root, self.config = Path(root), config

    @classmethod
    def create(cls, root: Path | str, config: LayersConfig) -> LayersFolder:
        root = Path(root)
        new = json.loads(json.dumps(config.to_dict(), sort_keys=True))
        path = root / SETTINGS
        if path.exists():
            old = cls.open(root)
            stored = json.loads(json.dumps(old.config.to_dict(), sort_keys=True))
            if stored != new:
                raise RunConflictError(
                    f"{root} holds a layers run with other settings "
                    f"({describe_diff(stored, new)}); nothing was overwritten: use another "
                    "--out, or the same settings to resume"
                )
            return old
        if root.exists() and any(not p.name.startswith(".") for p in root.iterdir()):
            raise RunConflictError(
                f"{root} exists, is not empty and is not a posgen layers folder; "
                "choose another --out"
            )
        atomic_write_json(path, {"kind": KIND, "schema": SCHEMA, "config": new})
        return cls(root, config)

    @classmethod
    def open(cls, root: Path | str) -> LayersFolder:
        root = Path(root)
        data = read_json(root / SETTINGS, "layers run settings")
        if data.get("kind") != KIND or data.get("schema") != SCHEMA:
            raise RunConflictError(
                f"{root / SETTINGS} is not a posgen layers run (schema {SCHEMA})"
            )
        try:
            config = LayersConfig.from_dict(data["config"])
        except (KeyError, TypeError, ValueError) as e:
            raise SchemaError(
                f"{root / SETTINGS}: not a readable layers run config ({e!s:.200})"
            ) from None
        return cls(root, config)

    def cell_path(self, cell: str) -> Path:
        return self.root / "cells" / f"{cell}.json"

    def has_cell(self, cell: str) -> bool:
        return self.cell_path(cell).is_file()

    def write_cell(self, cell: str, record: dict[str, Any]) -> None:
        atomic_write_json(self.cell_path(cell), record)

    def read_cell(self, cell: str) -> dict[str, Any]:
        return read_json(self.cell_path(cell), f"layers cell {cell}")

    @property
    def decomposition_path(self) -> Path:
        return self.root / "decomposition.parquet"
