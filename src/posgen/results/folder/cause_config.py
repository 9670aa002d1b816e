"""The typed configuration of a ``posgen cause`` run folder (its ``cause.json``).

``posgen cause`` builds a :class:`CauseConfig` (:func:`posgen.harness.cli.cause.resolve`);
its folder (:class:`CauseFolder`), the runner and the scores take it typed.
``to_dict()`` gives exactly the dict of earlier releases, so an earlier folder resumes.
Its cells: :meth:`CauseConfig.cells`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posgen.results.folder.config import ModelEntry
from posgen.results.folder.protocol import CommandFolder


@dataclass(frozen=True)
class CauseConfig:
    """Everything a ``posgen cause`` run's figures depend on.

    ``layers``: the layers replaced one at a time (empty without ``forms``); ``forms``:
    the ``logits=`` forms run in every layer and in each of ``layers``; ``controls``: the
    forms run in every layer only; ``schemes``: the position schemes whose logit change is
    predicted (canonical strings; none for a learned-absolute model, which gets no
    prediction); ``batch_size`` as given to lm-eval."""

    model: ModelEntry
    seed: int
    limit: int
    layers: tuple[int, ...]
    forms: tuple[str, ...]
    controls: tuple[str, ...]
    schemes: tuple[str, ...]
    batch_size: str

    def cells(self) -> list[tuple[str, dict[str, Any] | None]]:
        """``(cell, set_perturbation keyword arguments)`` in order: plain, every form and
        control in all layers, then each layer's forms."""
        cells: list[tuple[str, dict[str, Any] | None]] = [("plain", None)]
        for form in (*self.forms, *self.controls):
            cells.append((cell_name(form, None), {"seed": self.seed, "logits": form}))
        for layer in self.layers:
            for form in self.forms:
                kwargs = {"seed": self.seed, "logits": form, "layers": (layer,)}
                cells.append((cell_name(form, layer), kwargs))
        return cells

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.to_dict(),
            "seed": self.seed,
            "limit": self.limit,
            "layers": list(self.layers),
            "forms": list(self.forms),
            "controls": list(self.controls),
            "schemes": list(self.schemes),
            "batch_size": self.batch_size,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> CauseConfig:
        """The config of a stored run (``cause.json``'s ``config``)."""
        return cls(
            model=ModelEntry.from_dict(d["model"]),
            seed=int(d["seed"]),
            limit=int(d["limit"]),
            layers=tuple(int(i) for i in d["layers"]),
            forms=tuple(d["forms"]),
            controls=tuple(d["controls"]),
            schemes=tuple(d["schemes"]),
            batch_size=d["batch_size"],
        )


def cell_name(form: str, layer: int | None) -> str:
    """``<form>-all`` (every layer) or ``<form>-layer-NNN``."""
    return f"{form}-all" if layer is None else f"{form}-layer-{layer:03d}"


class CauseFolder(CommandFolder):
    """The folder of one ``posgen cause`` run (:mod:`posgen.results.folder.protocol`).

    Layout::

        cause.json                 settings (kind, schema, config)
        cells/<cell>.json          per-document log-likelihoods of one cell (plain, a form
                                   of logits in every layer or in one layer)
        prediction.parquet         the predicted and measured logit change per (document,
                                   window, scheme, layer, head); none without schemes
        layers_run.json            the --layers-run folder last given (a rerun without
                                   --layers-run relates to it again)
        cause_nll.csv, cause_prediction.csv, cause_relation.csv, cause_scores.json,
        cause.md, cause.png        the scores and the report (re-made on every run)
    """

    settings = "cause.json"
    kind = "posgen-cause"
    schema = 1
    command = "cause"

    config: CauseConfig

    @staticmethod
    def read_config(data: dict[str, Any]) -> CauseConfig:
        return CauseConfig.from_dict(data)

    @property
    def prediction_path(self) -> Path:
        return self.root / "prediction.parquet"

    def layers_run(self, given: Path | None = None) -> Path | None:
        """The ``--layers-run`` folder to relate to: ``given`` (then remembered), else the
        one an earlier run of this folder remembered, else None."""
        return self.link("layers_run", given)
