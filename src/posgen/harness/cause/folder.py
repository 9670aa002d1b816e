"""The folder of one ``posgen cause`` run: settings, one file per NLL cell, the prediction.

Layout::

    cause.json                 settings (kind, schema, config)
    cells/<cell>.json          per-document log-likelihoods of one cell (plain, a form of
                               logits in every layer or in one layer)
    prediction.parquet         the predicted and measured logit change per (document,
                               window, scheme, layer, head)
    cause_nll.csv, cause_prediction.csv, cause_relation.csv, cause_scores.json,
    cause.md, cause.png        the scores and the report (re-made on every run)

As ``posgen layers``' folder (:class:`posgen.harness.layers.folder.LayersFolder`): a rerun
with the same settings resumes, other settings or a foreign non-empty folder are refused,
every file is written atomically.
"""

from __future__ import annotations

from pathlib import Path

from posgen.harness.layers.folder import LayersFolder


class CauseFolder(LayersFolder):
    """``CauseFolder.create(root, config)`` to start or resume; ``.open(root)`` to read."""

    settings = "cause.json"
    kind = "posgen-cause"
    schema = 1
    command = "cause"

    @property
    def prediction_path(self) -> Path:
        return self.root / "prediction.parquet"
