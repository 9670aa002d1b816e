"""The one model-loading-and-decomposition step of the drivers: ``HFPosgenLM`` of a
model entry with its loading options, and the decomposition table of its loaded weights
(``posgen decompose``'s pipeline) written where the driver keeps it.

``posgen run`` (:class:`posgen.harness.run.cells.ModelSession`) and ``posgen layers``
(:mod:`posgen.harness.layers.runner`) load and decompose through here; ``posgen cause``
loads through here.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

from posgen.harness import loading  # looked up at call time (tests replace its loaders)
from posgen.harness.decomposition.pipeline import decompose_model
from posgen.harness.hf_posgen.model import HFPosgenLM
from posgen.results.folder.config import Decompose, ModelEntry
from posgen.results.folder.store import atomic_write_parquet


def load_entry_lm(
    entry: ModelEntry,
    batch_size: int | str | None,
    seed: int,
    device: str | None,
    placement: Callable[[], dict[str, Any]] | None = None,
) -> HFPosgenLM:
    """``HFPosgenLM`` of ``entry`` with its loading options
    (:func:`posgen.harness.loading.hflm_kwargs`); a random-init twin is built from the
    entry's architecture with ``seed`` and handed in loaded. ``placement``: where the
    entry loads with a device map, the further keyword arguments it gets (``posgen run``'s
    memory and offload folder)."""
    kwargs = {"batch_size": batch_size, **loading.hflm_kwargs(entry, device)}
    if placement is not None and kwargs.get("device_map") is not None:
        kwargs.update(placement())
    if entry.random_init:
        twin = loading.load_model(entry, kwargs["device"], seed=seed)
        return HFPosgenLM(pretrained=twin.model, tokenizer=twin.tokenizer, **kwargs)
    return HFPosgenLM(pretrained=entry.path, **kwargs)


def write_decomposition(lm: Any, entry: ModelEntry, spec: Decompose, seed: int, path: Path) -> Path:
    """The per-(doc, layer, head) decomposition of ``lm``'s loaded weights, unperturbed,
    on ``spec``'s probe windows (``posgen decompose``'s pipeline,
    :func:`posgen.harness.decomposition.pipeline.decompose_model`), labelled with the
    entry's label and random-init flag and written to ``path``."""
    lm.set_perturbation(None, None, seed)
    table = decompose_model(
        lm.model,
        tokenizer=lm.tokenizer,
        docs=spec.docs,
        tokens=spec.tokens,
        seed=seed,
        progress=False,
    )
    table["model"] = entry.label
    table["random_init"] = entry.random_init
    atomic_write_parquet(path, table)
    return path
