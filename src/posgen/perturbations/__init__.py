"""Seeded, deterministic perturbations: text (word order), position indices, features.

Public API::

    from posgen.perturbations import registry, parse
    p = parse("text", "swap:0.05")
    p.apply("the quick brown fox", seed=1234).text
"""

from posgen.perturbations import text  # noqa: F401  (registers the text schemes)
from posgen.perturbations import features, positions  # noqa: F401  (model-side schemes)
from posgen.perturbations.base import (
    KINDS,
    Perturbation,
    PerturbationError,
    PerturbationSpec,
    Registry,
    registry,
)
from posgen.perturbations.order_stats import OrderStats, order_stats
from posgen.perturbations.seeding import content_key, item_rng, token_key
from posgen.perturbations.text import TextPerturbation, TextResult


def parse(kind: str, text: str) -> Perturbation:
    """Build a perturbation from its short form, e.g. ``parse("position", "swap:0.05")``."""
    return registry.parse(kind, text)


__all__ = [
    "KINDS",
    "OrderStats",
    "Perturbation",
    "PerturbationError",
    "PerturbationSpec",
    "Registry",
    "TextPerturbation",
    "TextResult",
    "content_key",
    "item_rng",
    "order_stats",
    "parse",
    "registry",
    "token_key",
]
