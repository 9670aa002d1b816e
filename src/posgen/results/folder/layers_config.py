"""The typed configuration of a ``posgen layers`` run folder (its ``layers.json``).

``posgen layers`` builds a :class:`LayersConfig` (:func:`posgen.harness.cli.layers.resolve`);
its folder (:class:`LayersFolder`), the runner and the report assembly take it typed. ``to_dict()`` gives exactly the dict of earlier releases (``heads`` only with
``--heads``), so an earlier folder resumes. Its cells: :meth:`LayersConfig.cells`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from posgen.results.folder.config import Decompose, ModelEntry
from posgen.results.folder.protocol import CommandFolder


@dataclass(frozen=True)
class LayersCell:
    """One cell of a layers run: ``layers`` / ``heads`` the perturbation is restricted to
    (``plain``: no perturbation; ``all``: every layer, ``layers`` None)."""

    name: str
    plain: bool = False
    layers: tuple[int, ...] | None = None
    heads: tuple[int, ...] | None = None


@dataclass(frozen=True)
class LayersConfig:
    """Everything a ``posgen layers`` run's figures depend on.

    ``positions`` / ``features``: the model-side schemes (canonical strings, None when
    not given); ``layers``: the decoder layers profiled, in order; ``heads``: query heads
    per layer with ``--heads`` (one cell per head), else None; ``batch_size`` as given to
    lm-eval; ``decompose``: the probe windows of the fit (``docs`` 0: no fit)."""

    model: ModelEntry
    positions: str | None
    features: str | None
    seed: int
    limit: int
    layers: tuple[int, ...]
    batch_size: str
    decompose: Decompose
    heads: int | None = None

    def scheme(self) -> str:
        """The scheme as the report names it (``swap:0.2``, ``swap:0.2 + rope_noise:1.0``)."""
        return " + ".join(x for x in (self.positions, self.features) if x)

    def cells(self) -> list[LayersCell]:
        """In order: plain, each layer (or each head of each layer with ``heads``), all."""
        out = [LayersCell("plain", plain=True)]
        for i in self.layers:
            if self.heads:
                out += [
                    LayersCell(cell_name(i, h), layers=(i,), heads=(h,)) for h in range(self.heads)
                ]
            else:
                out.append(LayersCell(cell_name(i), layers=(i,)))
        return [*out, LayersCell("all")]

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.to_dict(),
            "positions": self.positions,
            "features": self.features,
            "seed": self.seed,
            "limit": self.limit,
            "layers": list(self.layers),
            "batch_size": self.batch_size,
            "decompose": self.decompose.to_dict(),
            **({"heads": self.heads} if self.heads else {}),
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> LayersConfig:
        """The config of a stored run (``layers.json``'s ``config``)."""
        return cls(
            model=ModelEntry.from_dict(d["model"]),
            positions=d["positions"],
            features=d["features"],
            seed=int(d["seed"]),
            limit=int(d["limit"]),
            layers=tuple(int(i) for i in d["layers"]),
            batch_size=d["batch_size"],
            decompose=Decompose(**d["decompose"]),
            heads=d.get("heads"),
        )


def cell_name(layer: int | None, head: int | None = None) -> str:
    """``all`` (every layer), ``layer-NNN`` or ``layer-NNN-head-HH``."""
    if layer is None:
        return "all"
    return f"layer-{layer:03d}" if head is None else f"layer-{layer:03d}-head-{head:02d}"


class LayersFolder(CommandFolder):
    """The folder of one ``posgen layers`` run (:mod:`posgen.results.folder.protocol`).

    Layout::

        layers.json                   settings (kind, schema, config)
        cells/<cell>.json             per-document log-likelihoods of one cell
        decomposition.parquet         the decomposition's per-(doc, layer, head) table
        length_run.json               the --length-run folder last given (a rerun without
                                      --length-run relates to it again)
        layer_profile.csv, layer_relation.csv, layers_scores.json, layers.md, layers.png
    """

    settings = "layers.json"
    kind = "posgen-layers"
    schema = 1
    command = "layers"

    config: LayersConfig

    @staticmethod
    def read_config(data: dict[str, Any]) -> LayersConfig:
        return LayersConfig.from_dict(data)

    @property
    def decomposition_path(self) -> Path:
        return self.root / "decomposition.parquet"

    def length_run(self, given: Path | None = None) -> Path | None:
        """The ``--length-run`` folder to relate to: ``given`` (then remembered), else the
        one an earlier run of this folder remembered, else None."""
        return self.link("length_run", given)
