"""The typed configuration of a ``posgen decompose`` folder (its ``decompose.json``), and
the folder (:mod:`posgen.results.folder.protocol`).

``posgen decompose`` builds a :class:`DecomposeConfig` (:mod:`posgen.harness.cli.decompose`);
its runner (:mod:`posgen.harness.decomposition.runner`) and its report
(:func:`posgen.results.report.folder_reports.regenerate_decompose`) take it typed.

Layout::

    decompose.json                 settings (kind, schema, config)
    cells/trained.parquet          the model's per-(doc, layer, head) fit
    cells/random_init.parquet      with --random-init: its twin's
    cells/head_map.npz             the median head's logits beside its fit (empty past
                                   the size a picture can show)
    cells/experiments.json         with --experiments: its summaries (its tables and
                                   plots are written beside them)
    heads.parquet, summary.csv, summary.parquet, layers.csv, heatmap_r_*.png,
    head_map.png                   the tables and plots (re-made on every run)
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, ClassVar

from posgen.atomic import atomic_write
from posgen.results.folder.config import ModelEntry
from posgen.results.folder.protocol import CommandFolder
from posgen.results.folder.store import RunConflictError, atomic_write_parquet, read_parquet

# the outputs of a posgen decompose run that kept no settings (before decompose.json)
EARLIER_OUTPUTS = ("heads.parquet", "summary.csv")


@dataclass(frozen=True)
class DecomposeConfig:
    """Everything a ``posgen decompose`` run's figures depend on.

    ``docs`` probe windows of ``tokens`` tokens; ``seed`` of the random-init twin (with
    ``random_init``); ``trained_context`` C of the past-context figures (None: not
    computed); ``length`` the canonical length scheme the model runs under (None: as
    trained); ``experiments``: controlled distance and the q/k pattern too."""

    model: ModelEntry
    random_init: bool
    docs: int
    tokens: int
    seed: int
    trained_context: int | None = None
    length: str | None = None
    experiments: bool = False

    def cells(self) -> list[str]:
        """The fits, in order: the model, then its twin."""
        return ["trained", *(["random_init"] if self.random_init else [])]

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model.to_dict(),
            "random_init": self.random_init,
            "docs": self.docs,
            "tokens": self.tokens,
            "seed": self.seed,
            "trained_context": self.trained_context,
            "length": self.length,
            "experiments": self.experiments,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DecomposeConfig:
        """The config of a stored run (``decompose.json``'s ``config``)."""
        context = d["trained_context"]
        return cls(
            model=ModelEntry.from_dict(d["model"]),
            random_init=bool(d["random_init"]),
            docs=int(d["docs"]),
            tokens=int(d["tokens"]),
            seed=int(d["seed"]),
            trained_context=None if context is None else int(context),
            length=d["length"],
            experiments=bool(d["experiments"]),
        )


class DecomposeFolder(CommandFolder):
    """The folder of one ``posgen decompose`` run; its cells are the fit tables
    (``trained``, ``random_init``), ``head_map`` and ``experiments``."""

    settings = "decompose.json"
    kind = "posgen-decompose"
    schema = 1
    command = "decompose"
    suffixes: ClassVar[dict[str, str]] = {
        "head_map": ".npz",
        "experiments": ".json",
    }  # fits: .parquet

    config: DecomposeConfig

    @staticmethod
    def read_config(data: dict[str, Any]) -> DecomposeConfig:
        return DecomposeConfig.from_dict(data)

    @classmethod
    def check_not_foreign(cls, root: Path) -> None:
        earlier = [name for name in EARLIER_OUTPUTS if (Path(root) / name).is_file()]
        if earlier and not cls.is_own(root):
            raise RunConflictError(
                f"{root} holds the output of an earlier posgen decompose, which kept no "
                f"settings ({earlier[0]}, no {cls.settings}), so it cannot be resumed; "
                "choose another --out"
            )
        super().check_not_foreign(root)

    def cell_path(self, cell: str) -> Path:
        return self.root / "cells" / f"{cell}{self.suffixes.get(cell, '.parquet')}"

    def has_results(self) -> bool:
        return any((self.root / "cells").glob("*.parquet"))

    def write_table(self, cell: str, table) -> None:
        atomic_write_parquet(self.cell_path(cell), table)

    def read_table(self, cell: str):
        return read_parquet(self.cell_path(cell))

    def write_head_map(self, actual, fitted, title: str) -> None:
        """The median head's maps (``actual`` None: no map at this size)."""
        import numpy as np

        arrays = {"title": np.array(title)}
        if actual is not None:
            arrays.update(actual=np.asarray(actual), fitted=np.asarray(fitted))
        atomic_write(self.cell_path("head_map"), lambda p: _save_npz(p, arrays))

    def read_head_map(self) -> tuple[Any, Any, str] | None:
        """``(actual, fitted, title)``, or None when the run drew no map."""
        import numpy as np

        with np.load(self.cell_path("head_map")) as data:
            if "actual" not in data:
                return None
            return data["actual"], data["fitted"], str(data["title"])


def _save_npz(path: Path, arrays: dict[str, Any]) -> None:
    import numpy as np

    with open(path, "wb") as f:  # a file object: np.savez would append .npz to a path
        np.savez(f, **arrays)
