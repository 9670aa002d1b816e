"""The base class of length schemes (:mod:`posgen.perturbations.length`)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from posgen.perturbations.base import Perturbation


@dataclass(frozen=True)
class LengthPerturbation(Perturbation):
    """Base class of length schemes. Exactly one of three mechanisms applies:
    an attention function (``lambda``, ``infllm``), a position factor (``scale``), or load-time
    ``rope_parameters`` (``dynamic``, ``yarn``); ``none`` applies nothing."""

    kind: ClassVar[str] = "length"
    rope_type: ClassVar[str | None] = None  # transformers rope_type set at load time

    @property
    def is_identity(self) -> bool:
        return False

    @property
    def position_factor(self) -> float:
        """Multiplier of position values (1.0 unless position interpolation)."""
        return 1.0

    @property
    def uses_attention(self) -> bool:
        """Whether the scheme replaces the attention function (Λ)."""
        return False

    def rope_parameters(self, config: Any) -> dict[str, Any] | None:
        """The ``rope_parameters`` to load the model with, or None to keep the config's."""
        return None

    def load_kwargs(self, config: Any) -> dict[str, Any]:
        """Extra ``from_pretrained`` kwargs for a model whose (pre-load) config is ``config``."""
        return {}
