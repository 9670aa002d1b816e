"""The model-side perturbation of one ``hf-posgen`` run: schemes, seed, layers.

``positions=`` and ``features=`` name registered schemes; ``logits=`` replaces attention
logits by their additive fit (:mod:`posgen.harness.model_side.logits.forms`); ``layers=`` restricts them to
chosen decoder layers (:mod:`posgen.harness.model_side.positions.layers`); the record of the perturbation goes into
every result and prefixes every ``--use_cache`` key.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from posgen.harness.model_side.logits.forms import LogitForm
from posgen.harness.model_side.positions.selection import format_layers, parse_layers
from posgen.perturbations.base import Perturbation, PerturbationError, registry
from posgen.perturbations.features import FeaturePerturbation
from posgen.perturbations.length import LengthPerturbation
from posgen.perturbations.positions import PositionPerturbation
from posgen.perturbations.seeding import DEFAULT_SEED


def parse_spec(kind: str, value: str | Perturbation | None) -> Perturbation | None:
    """``positions=``/``features=`` value -> perturbation (None for ``None``/``''``/``none``).

    Errors name the accepted forms, e.g. ``swap:RATE, shift:OFFSET, ...``.
    """
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    if isinstance(value, Perturbation):
        if value.kind != kind:
            raise PerturbationError(f"expected a {kind} perturbation, got {value.kind} {value}")
        return value
    try:
        return registry.parse(kind, str(value))
    except PerturbationError as exc:  # its message lists the accepted forms
        arg = "positions" if kind == "position" else "features"
        raise PerturbationError(f"{arg}={value}: {exc}") from None


# what each hf-posgen model argument takes, named when it is given empty
ARGUMENT_FORMS = {
    "positions": "a position scheme (e.g. swap:0.05)",
    "features": "a feature scheme (e.g. rope_noise:0.5)",
    "perturb_seed": "an integer seed in [0, 2**32)",
    "length": "a length scheme (e.g. lambda:4:64, yarn:2)",
    "layers": "a layer (12), a range (0-5) or ';'-separated ones (3;7;11)",
    "heads": "a query head (2), a range (0-3) or ';'-separated ones (0;5)",
    "logits": "a form (additive, distance, key, shuffled)",
}


def refuse_empty(given: Mapping[str, Any]) -> None:
    """Refuse an hf-posgen model argument given with an empty value (``logits=`` in
    ``--model_args``): it would silently mean the plain model (or every layer). Leaving
    the argument out (or ``none``) keeps its default."""
    for name, value in given.items():
        if isinstance(value, str) and not value.strip():
            raise PerturbationError(
                f"{name}= is empty: give {ARGUMENT_FORMS[name]}, or leave {name}= out"
            )


SEED_LIMIT = 2**32  # perturb_seed < 2**32, as posgen run's --seed (which it is set from)


def _seed_problem(seed: Any) -> str:
    """What is wrong with ``perturb_seed`` ('' when it is an integer in [0, 2**32): lm-eval
    hands ``perturb_seed=-1.0`` over as the float -1.0)."""
    if isinstance(seed, bool):
        return "a boolean"
    text = str(seed).strip()
    if text.isdigit():
        return "" if int(text) < SEED_LIMIT else "2**32 or more"
    try:
        number = float(text)
    except ValueError:
        return "not a number"
    wrong = ["negative"] if number < 0 else []
    if not (isinstance(seed, int) or text.lstrip("-").isdigit()):
        wrong.append("not written as an integer")
    return " and ".join(wrong)


@dataclass(frozen=True)
class ModelPerturbation:
    """The model-side perturbation of one run: position scheme, feature scheme, seed."""

    positions: PositionPerturbation | None = None
    features: FeaturePerturbation | None = None
    seed: int = DEFAULT_SEED
    length: LengthPerturbation | None = None
    layers: tuple[int, ...] | None = None  # decoder layers the schemes act in; None: all
    heads: tuple[int, ...] | None = None  # query heads within those layers; None: all
    logits: LogitForm | None = None  # logits replaced by (parts of) their additive fit
    donor: str | None = None  # logits=foreign: the sequence its distance term comes from

    @classmethod
    def parse(
        cls,
        positions: str | Perturbation | None,
        features: str | Perturbation | None,
        seed: int | str | None,
        layers: str | int | Sequence[int] | None = None,
        heads: str | int | Sequence[int] | None = None,
        logits: str | LogitForm | None = None,
    ) -> ModelPerturbation:
        seed = DEFAULT_SEED if seed is None else seed
        problem = _seed_problem(seed)
        if problem:
            raise PerturbationError(
                "perturb_seed must be an integer in [0, 2**32) written in digits (e.g. "
                f"perturb_seed=7); {seed!r} is {problem}"
            )
        new = cls(
            parse_spec("position", positions),
            parse_spec("feature", features),  # type: ignore[arg-type]
            int(seed),
            layers=parse_layers(layers),
            heads=parse_layers(heads, "heads"),
            logits=LogitForm.parse(logits),
        )
        if new.heads is not None and new.layers is None:
            raise PerturbationError(
                f"heads={heads} picks query heads within layers=; give layers= too"
            )
        if new.layers is not None and not (new.positions or new.features or new.logits):
            raise PerturbationError(
                f"layers={layers} restricts positions=/features=/logits= to those layers; "
                "give one of them too"
            )
        new.check_logits()
        return new

    def check_logits(self) -> None:
        """``logits=`` runs its own attention function: refuse what needs another one
        (qk schemes, ``heads=`` with positions or features: both mix heads in theirs)."""
        if self.logits is None:
            return
        what = f"logits={self.logits.name}"
        if self.features is not None and self.features.where == "qk":
            raise PerturbationError(
                f"{what} and features={self.features.to_string()} both replace the attention "
                "function; run them apart"
            )
        if self.heads is not None and (self.positions or self.features):
            raise PerturbationError(
                f"{what} with heads= picks heads for the replacement only; drop "
                "positions=/features= or heads="
            )

    @property
    def is_set(self) -> bool:
        """A position, feature or length scheme or ``logits=`` was given (even an identity
        scheme)."""
        schemes = (self.positions, self.features, self.length, self.logits)
        return any(s is not None for s in schemes)

    @property
    def changes_model(self) -> bool:
        """Some scheme or ``logits=`` would change the forward (identity schemes do not)."""
        schemes = (self.positions, self.features, self.length)
        moved = any(p is not None and not p.is_identity for p in schemes)
        return moved or self.logits is not None

    def to_dict(self) -> dict[str, Any]:
        """JSON-able record for results: full specs, short forms and seed."""
        return {
            "positions": None if self.positions is None else self.positions.spec.to_dict(),
            "features": None if self.features is None else self.features.spec.to_dict(),
            "positions_str": None if self.positions is None else self.positions.to_string(),
            "features_str": None if self.features is None else self.features.to_string(),
            "perturb_seed": self.seed,
            **(
                {}
                if self.length is None
                else {"length": self.length.spec.to_dict(), "length_str": self.length.to_string()}
            ),
            **({} if self.layers is None else {"layers": format_layers(self.layers)}),
            **({} if self.heads is None else {"heads": format_layers(self.heads)}),
            **({} if self.logits is None else {"logits": self.logits.to_string()}),
            **({} if self.donor is None else {"logits_donor": self.donor}),
        }

    def cache_namespace(self) -> str:
        """'' when nothing is set (answers equal plain ``hf``), else a digest of the specs
        and seed that prefixes every response-cache key."""
        if not self.is_set:
            return ""
        body = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(body.encode("utf-8")).hexdigest()[:32]
