"""One unpadded document's forward through the door under a length (and a position)
scheme, as ``posgen length`` runs each (scheme, document), for the tests of the length
runs."""

from __future__ import annotations

from typing import Any

import torch

from posgen.harness.model_side import door
from posgen.harness.model_side.perturbation import ModelPerturbation
from posgen.perturbations.seeding import DEFAULT_SEED


def document(
    model: torch.nn.Module,
    ids: torch.Tensor,
    length: Any,
    positions: Any = None,
    seed: int = DEFAULT_SEED,
    block_size: int | None = None,
) -> Any:
    """The door's context for a forward of ``ids`` ``[1, n]`` under ``length`` and
    ``positions`` (its plan checks that ``model`` was loaded for ``length``)."""
    p = ModelPerturbation(positions=positions, seed=seed, length=length)
    return door.forward(model, p, door.plan_forward(ids, p, model=model), block_size=block_size)
