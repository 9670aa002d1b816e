"""The one interface of model-side perturbations (position and feature schemes).

``hf-posgen`` plans each forward from the batch's rows without knowing the schemes'
types: a scheme says ``where`` it acts and supplies the matching method.

- ``where = "positions"``: :meth:`ModelSidePerturbation.draw` returns the offsets
  ``p[t] − t`` ``[n]`` of one row's position values (int64, or float64 when not integral),
  seen by the model's rotary embedding. Offsets of several schemes add up.
- ``where = "qk"``: :meth:`ModelSidePerturbation.perturb_qk` changes the model's own
  post-RoPE query or key ``[B, H, T, d]`` of one layer inside attention.

Only the first ``span`` tokens of a row are perturbed (the context of a log-likelihood
request, the whole window in rolling perplexity), keyed on those tokens alone. A new
scheme is one registered subclass in one file.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from posgen.perturbations.base import Perturbation

WHERE = ("positions", "qk")


@dataclass(frozen=True)
class ModelSidePerturbation(Perturbation):
    """Base class of position and feature schemes."""

    where: ClassVar[str]

    def draw(self, token_ids: np.ndarray, span: int, seed: int) -> np.ndarray:
        """Offsets ``p[t] − t`` of one row's position values, shape ``[n]``, from the
        row's first ``span`` tokens (``where == "positions"``)."""
        raise NotImplementedError(f"{self.name} does not act on positions")

    def perturb_qk(
        self,
        x: Any,
        tensor: str,
        layer: int,
        spans: Sequence[int],
        keys: Sequence[bytes],
        seed: int,
        slots: Sequence[np.ndarray | None] = (),
    ) -> Any:
        """The perturbed ``x`` (``tensor``: ``"query"`` or ``"key"``, torch ``[B, H, T, d]``)
        of layer ``layer``; row b is perturbed on its first ``spans[b]`` tokens, or on the
        tokens ``slots[b]`` when given (the content of a chat-templated context), keyed by
        ``keys[b]`` (``where == "qk"``)."""
        raise NotImplementedError(f"{self.name} does not act on queries and keys")
