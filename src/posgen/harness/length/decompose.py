"""``posgen length --decompose``: the per-head decomposition of every (scheme, document).

For each (scheme, document) of the run, the exact fit W[i, j] ≈ a[i−j] + b[i] + c[j]
(:func:`posgen.harness.decomposition.pipeline.decompose_windows`) is made on the very token
ids the NLL forward scored (the document cut to the run's max length), with the model the
runner loaded for the scheme (rope scalings applied at load) and each captured forward run
inside the door under the scheme (:func:`posgen.harness.model_side.door.forward`:
``scale:F`` and the position scheme in the rotary embedding, with the run's seed). With the trained
context C, every head gets r on the query rows before C and past it and the rms of a[d]
about its in-context trend (:mod:`posgen.harness.decomposition.past_context`).

One record per (scheme, document), ``RUN/decompose/<scheme>/<document>.json``: the rows of
every (layer, head), written atomically when the fit finishes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from posgen.harness.decomposition.pipeline import decompose_windows
from posgen.harness.model_side import door
from posgen.harness.model_side.perturbation import ModelPerturbation
from posgen.perturbations.length import LengthPerturbation
from posgen.perturbations.positions import PositionPerturbation
from posgen.results.folder.store import atomic_write_json
from posgen.results.scores.length import json_ready
from posgen.results.scores.length_decompose import decomposition_path

if TYPE_CHECKING:
    from posgen.harness.loading import LoadedModel
    from posgen.results.folder.length_config import LengthConfig

INCLUDE_DIAGONAL = True  # the fit's defaults, as posgen decompose runs them
SINK_KEYS = 0


def scheme_forward(
    scheme: LengthPerturbation,
    positions: PositionPerturbation | None,
    seed: int,
    block_size: int | None,
) -> Callable[[Any, list[int]], Any]:
    """``forward_context(model, ids)``: the length run's forward of ``ids`` under ``scheme``
    (and ``positions``), through the door."""
    p = ModelPerturbation(positions=positions, seed=seed, length=scheme)

    def forward_context(model: Any, ids: list[int]) -> Any:
        import torch

        input_ids = torch.tensor([ids], dtype=torch.long, device=model.device)
        plan = door.plan_forward(input_ids, p, model=model)
        return door.forward(model, p, plan, block_size=block_size)

    return forward_context


def decompose_document(
    folder: Path,
    config: LengthConfig,
    loaded: LoadedModel,
    scheme: LengthPerturbation,
    doc: str,
    ids: list[int],
    positions: PositionPerturbation | None,
    log: Callable[[str], None],
) -> None:
    """Fit one (scheme, document) on ``loaded.model`` (loaded for ``scheme``) and write its
    record: one row per (layer, head) with the ``past_context`` columns (C = the run's
    trained context)."""
    start = time.perf_counter()
    rows = decompose_windows(
        loaded.model,
        [ids],
        name=scheme.to_string(),
        progress=False,
        include_diagonal=INCLUDE_DIAGONAL,
        sink_keys=SINK_KEYS,
        length=scheme,
        context=config.trained_context,
        forward_context=scheme_forward(scheme, positions, config.seed, config.block_size),
    )
    seconds = time.perf_counter() - start
    record = {
        "scheme": scheme.to_string(),
        "spec": scheme.spec.to_dict(),
        "document": doc,
        "n_tokens": len(ids),
        "context": config.trained_context,
        "include_diagonal": INCLUDE_DIAGONAL,
        "sink_keys": SINK_KEYS,
        "heads": [{k: v for k, v in row.items() if k != "doc"} for row in rows],
        "seconds": seconds,
        "loaded": loaded.record,
    }
    atomic_write_json(decomposition_path(folder, scheme.to_string(), doc), json_ready(record))
    log(f"{scheme.to_string():>16}  {doc:<20} decomposition  {seconds:.1f} s")
