"""The run folder: resolved config, one file per finished cell, tidy tables, report.

Layout (every file written atomically: a temporary file in the same folder, then
``os.replace``; an interrupted run never leaves a half-written file)::

    RUN/
      config.json                     resolved config + its SHA-256 + schema_version
      cells/<model>/<cell>.json       one finished (model, task, perturbation) cell:
                                      tidy rows and per-document (num, den) pairs
      raw/<model>/<cell>/<name>/      ``posgen run``: lm-eval's own output for the cell, as
                                      ``lm_eval --output_path raw/<model>/<cell>
                                      --log_samples`` writes it (results_<date>.json,
                                      samples_<task>_<date>.jsonl; <name> is lm-eval's
                                      sanitized model name), by its EvaluationTracker
      raw/<model>/<cell>.results.json ``posgen ingest``: lm-eval's results for the cell
      raw/<model>/<cell>.samples.jsonl ``posgen ingest``: its logged samples
      raw/<model>/lm_eval.log         ``posgen run``: lm-eval's log and progress bars
      decomposition/<model>.parquet   the per-(doc, layer, head) decomposition fit
      results.parquet                 tidy table of every cell (schema.RESULT_COLUMNS)
      perdoc.parquet                  per-document paired deltas (schema.PERDOC_COLUMNS)
      scores.json                     degradation, tolerance, fit quality, correlations
      report.md, report.html          the report

A cell file is written last, after its raw files (a cell's raw folder is written as a
whole: a temporary folder renamed into place), so its presence means "finished". A
rerun with the same config skips finished cells; a rerun into a folder that holds
results of another config is refused (:class:`RunConflictError`, naming each setting
that differs with both values) and nothing is overwritten; a folder whose run finished
nothing yet takes the new config. ``posgen run`` and ``posgen ingest`` hold the folder's
lock while they write it (:meth:`RunStore.create`, :mod:`posgen.results.folder.protocol`).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from posgen.atomic import atomic_write_folder, atomic_write_text
from posgen.results.folder.config import RunConfig
from posgen.results.folder.folder_kind import folder_refusal
from posgen.results.folder.model_identity import legacy_resume, show
from posgen.results.folder.protocol import CommandFolder
from posgen.results.folder.schema import (
    SCHEMA_VERSION,
    SchemaError,
    canonical_json,
    check_version,
    config_hash,
)
from posgen.results.folder.store import (
    RunConflictError,
    atomic_write_json,
    atomic_write_parquet,
    describe_diff,
    json_default,
    read_json,
    read_parquet,
    slug,
)

CONFIG_FILE = "config.json"


class RunStore(CommandFolder):
    """One run folder. Build with :meth:`create` (a run) or :meth:`open` (read it)."""

    def __init__(self, root: Path, config: dict[str, Any], digest: str) -> None:
        self.root = Path(root)
        self.config = config
        self.config_hash = digest

    @functools.cached_property
    def run_config(self) -> RunConfig:
        """The stored config, typed; a config it cannot read is a :class:`SchemaError`."""
        try:
            return RunConfig.from_dict(self.config)
        except (KeyError, TypeError, ValueError) as e:
            raise SchemaError(
                f"{self.root / CONFIG_FILE}: not a readable run config ({type(e).__name__}: {e})"
            ) from None

    settings = CONFIG_FILE
    command = "run"

    @classmethod
    def start(cls, root: Path | str, run_config: RunConfig | Mapping[str, Any]) -> RunStore:
        """Start or resume a run with ``run_config`` (stored as ``to_dict()``; a plain
        mapping is stored as given); refuse a folder holding another config."""
        root = Path(root)
        path = root / CONFIG_FILE
        old = cls.open(root) if cls.is_own(root) else None
        note = None
        if old is not None and isinstance(run_config, RunConfig) and old.has_results():
            run_config, note = legacy_resume(run_config, old.run_config, root)
        plain = run_config.to_dict() if isinstance(run_config, RunConfig) else dict(run_config)
        config = json.loads(canonical_json(plain))
        digest = config_hash(config)
        if old is not None:
            if old.config_hash == digest:
                show(note)
                return old
            if old.has_results():
                raise RunConflictError(
                    f"{root} holds a run with a different config "
                    f"({describe_diff(old.config, config)}); nothing was overwritten. "
                    "Use another --out folder, or rerun with the same settings to resume."
                )
            # a run that stopped before finishing anything (e.g. its model failed to load)
        else:
            cls.check_not_foreign(root)
        atomic_write_json(
            path, {"schema_version": SCHEMA_VERSION, "config_hash": digest, "config": config}
        )
        return cls(root, config, digest)

    @classmethod
    def open(cls, root: Path | str) -> RunStore:
        """Open an existing run folder (checks its schema version)."""
        root = Path(root)
        refusal = folder_refusal(root, cls.command)
        if refusal is not None:  # none there, or not a run folder: say what it is
            raise SchemaError(refusal)
        data = read_json(root / CONFIG_FILE, "run config")
        check_version(data.get("schema_version"), str(root / CONFIG_FILE))
        config = data.get("config")
        if not isinstance(config, dict) or config_hash(config) != data.get("config_hash"):
            raise SchemaError(
                f"{root / CONFIG_FILE} is corrupt: its config does not match its config_hash"
            )
        return cls(root, config, data["config_hash"])

    def has_results(self) -> bool:
        """True when any cell or decomposition has been written into the folder."""
        return any((self.root / "cells").glob("*/*.json")) or any(
            (self.root / "decomposition").glob("*.parquet")
        )

    # cells ---------------------------------------------------------------------------
    def cell_path(self, model: str, cell_id: str) -> Path:
        return self.root / "cells" / slug(model) / f"{cell_id}.json"

    def has_cell(self, model: str, cell_id: str) -> bool:
        """True when the cell finished under this config (a stale file counts as absent)."""
        path = self.cell_path(model, cell_id)
        if not path.is_file():
            return False
        try:
            data = read_json(path, "cell")
        except SchemaError:
            return False
        return (
            data.get("schema_version") == SCHEMA_VERSION
            and data.get("config_hash") == self.config_hash
        )

    def write_cell(
        self,
        model: str,
        cell_id: str,
        record: Mapping[str, Any],
        raw_results: Mapping[str, Any] | None = None,
        samples: Mapping[str, list[dict[str, Any]]] | None = None,
        lm_eval_output: Callable[[str], object] | None = None,
    ) -> Path:
        """Write lm-eval's raw output, then the cell record (the 'finished' marker).

        ``lm_eval_output(folder)`` writes lm-eval's own files for the cell into a temporary
        folder that becomes :meth:`raw_cell_dir` as a whole; ``raw_results`` and ``samples``
        are written as ``<cell>.results.json`` and ``<cell>.samples.jsonl`` instead."""
        raw_dir = self.root / "raw" / slug(model)
        if lm_eval_output is not None:
            atomic_write_folder(self.raw_cell_dir(model, cell_id), lm_eval_output)
        if raw_results is not None:
            atomic_write_json(raw_dir / f"{cell_id}.results.json", raw_results)
        if samples is not None:
            lines = [
                json.dumps({"task": task, **s}, default=json_default, sort_keys=True)
                for task, items in samples.items()
                for s in items
            ]
            atomic_write_text(raw_dir / f"{cell_id}.samples.jsonl", "\n".join(lines) + "\n")
        path = self.cell_path(model, cell_id)
        atomic_write_json(
            path,
            {
                **record,
                "schema_version": SCHEMA_VERSION,
                "config_hash": self.config_hash,
                "cell_id": cell_id,
                "model": model,
            },
        )
        return path

    def raw_cell_dir(self, model: str, cell_id: str) -> Path:
        """The folder of lm-eval's own output for one cell of ``posgen run``."""
        return self.root / "raw" / slug(model) / cell_id

    def read_cells(self) -> list[dict[str, Any]]:
        """Every finished cell of this config, sorted by model and cell id (scored
        readers check each with :func:`check_cell_record`)."""
        out = []
        for path in sorted((self.root / "cells").glob("*/*.json")):
            data = read_json(path, "cell")
            check_version(data.get("schema_version"), str(path))
            if data.get("config_hash") == self.config_hash:
                out.append(data)
        return out

    # tables and documents ---------------------------------------------------------------
    def write_table(self, name: str, df) -> Path:
        path = self.root / name
        atomic_write_parquet(path, df)
        return path

    def read_table(self, name: str):
        path = self.root / name
        if not path.is_file():
            raise SchemaError(f"{path} not found; run `posgen run` (or `posgen report`) first")
        return read_parquet(path)

    def decomposition_path(self, model: str) -> Path:
        return self.root / "decomposition" / f"{slug(model)}.parquet"

    def depth_account_paths(self, model: str) -> tuple[Path, Path]:
        """The decomposition's account of the depth curve of one model (``--kinds
        depth``): its per-document values and its attention masses."""
        folder = self.root / "depth_account"
        return folder / f"{slug(model)}.values.parquet", folder / f"{slug(model)}.mass.parquet"

    def has_depth_account(self, model: str) -> bool:
        return all(p.is_file() for p in self.depth_account_paths(model))

    def write_json(self, name: str, obj: Any) -> Path:
        path = self.root / name
        payload = dict(obj) if isinstance(obj, Mapping) else {"data": obj}
        atomic_write_json(path, {**payload, "schema_version": SCHEMA_VERSION})
        return path

    def read_json(self, name: str) -> dict[str, Any]:
        data = read_json(self.root / name, name)
        check_version(data.get("schema_version"), str(self.root / name))
        return data
