"""``HFPosgenLM`` of a model entry, built from the loader's keyword arguments
(:func:`posgen.harness.loading.hflm_kwargs`; a random-init twin loaded by
:func:`posgen.harness.loading.load_model` and handed in): how ``posgen run``
(:class:`posgen.harness.run.cells.ModelSession`), ``posgen layers`` and ``posgen cause``
get their model. The decomposition of its loaded weights is written by
:func:`posgen.harness.decomposition.pipeline.write_decomposition`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from posgen.harness import loading  # looked up at call time (tests replace its loaders)
from posgen.harness.hf_posgen.model import HFPosgenLM
from posgen.results.folder.config import ModelEntry


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
