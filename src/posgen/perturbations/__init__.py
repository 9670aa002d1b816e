"""Seeded, deterministic perturbations: text (word order), position indices, features.

Public API::

    from posgen.perturbations import registry, parse
    p = parse("text", "swap:0.05")
    p.apply("the quick brown fox", seed=1234).text
"""

from posgen.perturbations import depth as _depth  # noqa: F401  (evidence depth, both forms)
from posgen.perturbations import features as _features  # noqa: F401  (model-side schemes)
from posgen.perturbations import length as _length  # noqa: F401  (length schemes)
from posgen.perturbations import positions as _positions  # noqa: F401
from posgen.perturbations import text as _text  # noqa: F401  (registers the text schemes)
from posgen.perturbations.base import (
    KINDS,
    Perturbation,
    PerturbationError,
    PerturbationSpec,
    Registry,
    registry,
)
from posgen.perturbations.order_stats import OrderStats, combine_stats, order_stats
from posgen.perturbations.seeding import DEFAULT_SEED, content_key, item_rng, token_key
from posgen.perturbations.text import TextPerturbation, TextResult


def parse(kind: str, text: str) -> Perturbation:
    """Build a perturbation from its short form, e.g. ``parse("position", "swap:0.05")``."""
    return registry.parse(kind, text)


__all__ = [
    "DEFAULT_SEED",
    "KINDS",
    "OrderStats",
    "Perturbation",
    "PerturbationError",
    "PerturbationSpec",
    "Registry",
    "TextPerturbation",
    "TextResult",
    "combine_stats",
    "content_key",
    "item_rng",
    "order_stats",
    "parse",
    "registry",
    "token_key",
]
