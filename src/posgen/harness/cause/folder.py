"""The folder of one ``posgen cause`` run: settings, one file per NLL cell, the prediction.

Layout::

    cause.json                 settings (kind, schema, config)
    cells/<cell>.json          per-document log-likelihoods of one cell (plain, a form of
                               logits in every layer or in one layer)
    prediction.parquet         the predicted and measured logit change per (document,
                               window, scheme, layer, head)
    layers_run.json            the --layers-run folder last given (a rerun without
                               --layers-run relates to it again)
    cause_nll.csv, cause_prediction.csv, cause_relation.csv, cause_scores.json,
    cause.md, cause.png        the scores and the report (re-made on every run)

As ``posgen layers``' folder (:class:`posgen.harness.layers.folder.LayersFolder`): a rerun
with the same settings resumes, other settings or a foreign non-empty folder are refused,
every file is written atomically.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posgen.harness.layers.folder import LayersFolder
from posgen.results.folder.cause_config import CauseConfig
from posgen.results.folder.store import atomic_write_json, read_json


class CauseFolder(LayersFolder):
    """``CauseFolder.create(root, config)`` to start or resume; ``.open(root)`` to read."""

    settings = "cause.json"
    kind = "posgen-cause"
    schema = 1
    command = "cause"

    config: CauseConfig

    @staticmethod
    def config_dict(config: CauseConfig) -> dict[str, Any]:
        return config.to_dict()

    @staticmethod
    def read_config(data: dict[str, Any]) -> CauseConfig:
        return CauseConfig.from_dict(data)

    @property
    def prediction_path(self) -> Path:
        return self.root / "prediction.parquet"

    def layers_run(self, given: Path | None) -> Path | None:
        """The layers folder to relate to: ``given`` (then remembered), else the one
        remembered from an earlier run of this folder, else None."""
        link = self.root / "layers_run.json"
        if given is not None:
            atomic_write_json(link, {"path": str(Path(given).resolve())})
            return Path(given)
        if link.is_file():
            return Path(read_json(link, "cause run's layers link")["path"])
        return None
