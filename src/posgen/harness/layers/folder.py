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
    """``LayersFolder.create(root, config)`` to start or resume; ``.open(root)`` to read.

    A subclass is the folder of another command with the same shape (settings file, one
    file per cell): it names its ``settings`` file, ``kind``, ``schema`` and ``command``,
    and how its config is stored (``config_dict``, ``read_config``)."""

    settings: str = SETTINGS
    kind: str = KIND
    schema: int = SCHEMA
    command: str = "layers"

    def __init__(self, root: Path, config: LayersConfig) -> None:
        self.root, self.config = Path(root), config

    @classmethod
    def create(cls, root: Path | str, config: LayersConfig) -> LayersFolder:
        root = Path(root)
        new = json.loads(json.dumps(cls.config_dict(config), sort_keys=True))
        path = root / cls.settings
        if path.exists():
            old = cls.open(root)
            stored = json.loads(json.dumps(cls.config_dict(old.config), sort_keys=True))
            if stored != new:
                raise RunConflictError(
                    f"{root} holds a {cls.command} run with other settings "
                    f"({describe_diff(stored, new)}); nothing was overwritten: use another "
                    "--out, or the same settings to resume"
                )
            return old
        if root.exists() and any(not p.name.startswith(".") for p in root.iterdir()):
            raise RunConflictError(
                f"{root} exists, is not empty and is not a posgen {cls.command} folder; "
                "choose another --out"
            )
        atomic_write_json(path, {"kind": cls.kind, "schema": cls.schema, "config": new})
        return cls(root, cls.read_config(new))

    @classmethod
    def open(cls, root: Path | str) -> LayersFolder:
        root = Path(root)
        data = read_json(root / cls.settings, f"{cls.command} run settings")
        if data.get("kind") != cls.kind or data.get("schema") != cls.schema:
            raise RunConflictError(
                f"{root / cls.settings} is not a posgen {cls.command} run (schema {cls.schema})"
            )
        try:
            config = cls.read_config(data["config"])
        except (KeyError, TypeError, ValueError) as e:
            raise SchemaError(
                f"{root / cls.settings}: not a readable {cls.command} run config ({e!s:.200})"
            ) from None
        return cls(root, config)

    @staticmethod
    def config_dict(config: Any) -> dict[str, Any]:
        """The settings as stored (a subclass with another config type overrides both)."""
        return config.to_dict()

    @staticmethod
    def read_config(data: dict[str, Any]) -> Any:
        """The config of stored settings ``data``."""
        return LayersConfig.from_dict(data)

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
