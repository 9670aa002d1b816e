"""Length schemes: how a model is run on sequences longer than its trained context C.

- ``none``: plain extrapolation (the model as it is).
- ``lambda:G,W``: LM-Infinite's Λ-shaped attention (Han et al., 2023). Query i attends
  the keys j with ``0 ≤ i − j < W`` at their true distance, plus the first G tokens
  when they are outside that window (``i − j ≥ W``); those global keys are seen at
  distance exactly W (the query rotated to position W, the key to position 0). With
  ``n ≤ W`` it is plain causal attention. Applied through a registered attention function
  (:mod:`posgen.harness.model_side.attention.lambda_attention`).
- ``scale:F``: position interpolation by an extension factor F: ``p[t] = t / F`` (the same
  as ``positions=scale:1/F``), applied inside the rotary embedding like every position
  scheme, so it combines with any position scheme (the scheme's values divided by F).
- ``dynamic:F``, ``yarn:F``: the rope scalings transformers implements (dynamic NTK,
  YaRN), set at load time through ``rope_parameters`` (:meth:`LengthPerturbation.load_kwargs`).
- ``infllm`` / ``infllm:KEY=VALUE,...``: InfLLM's block memory (Xiao et al., 2024), an
  attention function like Λ (:mod:`posgen.perturbations.length_infllm`); parameters left
  out take InfLLM's defaults scaled to C.

None of them draws random numbers: every one is deterministic. Parse the short forms
with :func:`parse_length` (``lambda`` takes two values, so the generic registry parser
does not apply).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from typing import Any, ClassVar

import numpy as np

from posgen.perturbations.base import PerturbationError, registry
from posgen.perturbations.length_base import LengthPerturbation
from posgen.perturbations.length_infllm import LengthInfLLM, parse_infllm
from posgen.perturbations.positions import PositionPerturbation

__all__ = [
    "InterpolatedPositions",
    "LengthDynamic",
    "LengthInfLLM",
    "LengthLambda",
    "LengthNone",
    "LengthPerturbation",
    "LengthScale",
    "LengthYarn",
    "check_length_list",
    "combined_positions",
    "parse_in_context",
    "parse_length",
    "parse_length_list",
    "with_context",
]

_CONTEXT = re.compile(r"\bC\b")  # the trained context in a scheme (``lambda:4,C``)


def _check_factor(name: str, value: float, minimum: float) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not math.isfinite(value)
        or not value >= minimum
    ):
        raise PerturbationError(
            f"{name}: factor must be a finite number >= {minimum:g}, got {value!r}"
        )


@registry.register
@dataclass(frozen=True)
class LengthNone(LengthPerturbation):
    """Plain extrapolation: the model runs unchanged past its trained context."""

    name: ClassVar[str] = "none"

    @property
    def is_identity(self) -> bool:
        return True


@registry.register
@dataclass(frozen=True)
class LengthLambda(LengthPerturbation):
    """LM-Infinite's Λ-shaped attention: a local window of ``window`` keys plus
    ``n_global`` leading tokens seen at distance ``window``."""

    name: ClassVar[str] = "lambda"
    n_global: int = 4
    window: int = 2048

    def validate(self) -> None:
        for field, value, low in (("n_global", self.n_global, 0), ("window", self.window, 1)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise PerturbationError(f"lambda: {field} must be an int >= {low}, got {value!r}")

    @property
    def uses_attention(self) -> bool:
        return True

    def to_string(self) -> str:
        return f"lambda:{self.n_global},{self.window}"

    @classmethod
    def usage(cls) -> str:
        return "lambda:GLOBAL,WINDOW"


@registry.register
@dataclass(frozen=True)
class LengthScale(LengthPerturbation):
    """Position interpolation: ``p[t] = t / factor`` (factor > 1 compresses positions)."""

    name: ClassVar[str] = "scale"
    short_param: ClassVar[str] = "factor"
    factor: float = 2.0

    def validate(self) -> None:
        _check_factor(self.name, self.factor, 1.0)

    @property
    def is_identity(self) -> bool:
        return self.factor == 1

    @property
    def position_factor(self) -> float:
        return 1.0 / float(self.factor)


@dataclass(frozen=True)
class _RopeScaling(LengthPerturbation):
    """A transformers rope scaling (``rope_type`` = name) with extension factor F."""

    short_param: ClassVar[str] = "factor"
    factor: float = 2.0

    def validate(self) -> None:
        _check_factor(self.name, self.factor, 1.0)

    def rope_parameters(self, config: Any) -> dict[str, Any]:
        """``{"rope_type", "factor", "rope_theta", ...}`` from the model's own config.

        transformers requires ``rope_theta`` in the dict (a TypeError without it) and
        YaRN its ``original_max_position_embeddings`` (the trained context)."""
        current = _config_rope(config)
        if current.get("rope_type", "default") not in ("default", None):
            raise PerturbationError(
                f"length={self.to_string()}: the model already uses rope scaling "
                f"{current.get('rope_type')!r}; posgen does not stack rope scalings"
            )
        params: dict[str, Any] = {
            "rope_type": self.rope_type,
            "factor": float(self.factor),
            "rope_theta": float(current["rope_theta"]),
        }
        if self.name == "yarn":
            params["original_max_position_embeddings"] = int(config.max_position_embeddings)
        for key in ("partial_rotary_factor",):
            if key in current:
                params[key] = current[key]
        return params

    def load_kwargs(self, config: Any) -> dict[str, Any]:
        kwargs: dict[str, Any] = {"rope_parameters": self.rope_parameters(config)}
        if self.name == "yarn":
            trained = int(config.max_position_embeddings)
            kwargs["max_position_embeddings"] = math.ceil(trained * float(self.factor))
        return kwargs


@registry.register
@dataclass(frozen=True)
class LengthDynamic(_RopeScaling):
    """transformers' dynamic NTK rope scaling: the RoPE base grows with the forward's
    length once it passes the trained context (no change inside it)."""

    name: ClassVar[str] = "dynamic"
    rope_type: ClassVar[str | None] = "dynamic"


@registry.register
@dataclass(frozen=True)
class LengthYarn(_RopeScaling):
    """transformers' YaRN rope scaling, extension factor F over the trained context."""

    name: ClassVar[str] = "yarn"
    rope_type: ClassVar[str | None] = "yarn"


def _config_rope(config: Any) -> dict[str, Any]:
    rope = getattr(config, "rope_parameters", None)
    if isinstance(rope, dict) and "rope_theta" in rope:
        return dict(rope)
    theta = getattr(config, "rope_theta", None)
    if theta is None:
        raise PerturbationError(
            f"{type(config).__name__} has no rope_theta: rope scalings need a RoPE model"
        )
    return {"rope_type": "default", "rope_theta": theta}


def _int(text: str, what: str, spec: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise PerturbationError(
            f"length scheme {spec!r}: {what} {text!r} is not an integer; "
            f"write {LengthLambda.usage()}"
        ) from None


def parse_length(text: str) -> LengthPerturbation:
    """Strictly parse a length scheme: ``none``, ``lambda:G,W``, ``scale:F``,
    ``dynamic:F``, ``yarn:F``, ``infllm[:KEY=VALUE,...]``. ``lambda:G:W`` (and ``:``
    between infllm's pairs) is accepted too, for lm-eval's ``--model_args``, which splits
    at every comma. Errors list the accepted forms."""
    spec = text.strip()
    name, sep, value = spec.partition(":")
    name = name.strip()
    if name == "infllm":
        return parse_infllm(spec, value)
    if name == "lambda":
        parts = value.split("," if "," in value else ":")
        if not sep or len(parts) != 2:
            raise PerturbationError(
                f"length scheme {spec!r}: write {LengthLambda.usage()} (two integers)"
            )
        n_global = _int(parts[0].strip(), "GLOBAL", spec)
        return LengthLambda(n_global, _int(parts[1].strip(), "WINDOW", spec))
    if name in ("scale", "dynamic", "yarn") and not value.strip():
        raise PerturbationError(f"length scheme {spec!r} needs a value: write {name}:FACTOR")
    scheme = registry.parse("length", spec)
    assert isinstance(scheme, LengthPerturbation)
    return scheme


def with_context(text: str, trained_context: int) -> str:
    """Schemes text with every stand-alone ``C`` (the trained context) replaced by its
    value: ``with_context("none;lambda:4,C", 8192) == "none;lambda:4,8192"``."""
    return _CONTEXT.sub(str(trained_context), text)


def parse_in_context(text: str, trained_context: int) -> LengthPerturbation:
    """One scheme with every stand-alone ``C`` read as ``trained_context``
    (:func:`with_context`); an error quotes the scheme as written (``'lambda:4,C,7'``),
    never with ``C`` replaced by its value."""
    spec = text.strip()
    resolved = with_context(spec, trained_context)
    try:
        return parse_length(resolved)
    except PerturbationError as exc:
        if resolved == spec:
            raise
        raise PerturbationError(str(exc).replace(repr(resolved), repr(spec))) from None


def parse_length_list(text: str, trained_context: int | None = None) -> list[LengthPerturbation]:
    """Parse a ``;``-separated list (``lambda`` uses the comma): ``none;lambda:4,2048;yarn:2``;
    ``C`` stands for ``trained_context`` (:func:`with_context`), which also sets the
    parameters an ``infllm`` scheme leaves out. A scheme listed twice is refused."""
    return [s for s in _parse_items(text, trained_context, False) if s is not None]


def check_length_list(text: str) -> None:
    """Refuse a scheme list that cannot parse whatever the trained context C is: every
    scheme is checked with C unresolved, and none may be listed twice."""
    _parse_items(text, None, True)


def _parse_items(
    text: str, context: int | None, unresolved: bool
) -> list[LengthPerturbation | None]:
    """Each scheme of ``text`` with C = ``context``; with ``unresolved`` and no context, a
    scheme written with C is checked with a stand-in value and given as None."""
    items = [t for t in (s.strip() for s in text.split(";")) if t]
    if not items:
        raise PerturbationError("no length scheme given; e.g. none;lambda:4,2048;scale:2")
    seen: dict[str, str] = {}
    out: list[LengthPerturbation | None] = []
    for item in items:
        symbolic = unresolved and context is None and _CONTEXT.search(item) is not None
        stand_in = 2 if symbolic else context  # C's value, or a stand-in for the syntax
        scheme = parse_length(item) if stand_in is None else parse_in_context(item, stand_in)
        if context is not None and hasattr(scheme, "for_context"):
            scheme = scheme.for_context(context)  # infllm: its defaults scaled to C
        key = " ".join(item.split()) if symbolic else scheme.to_string()
        if key in seen:
            raise PerturbationError(
                f"length scheme {key} is listed twice ({seen[key]!r} and {item!r}); "
                "give each scheme once"
            )
        seen[key] = item
        out.append(None if symbolic else scheme)
    return out


@dataclass(frozen=True)
class InterpolatedPositions(PositionPerturbation):
    """A position scheme (or the identity) multiplied by ``factor``: how ``scale:F``
    combines with ``positions=``. Not registered: runs record both schemes separately."""

    name: ClassVar[str] = "interpolated"
    inner: PositionPerturbation | None = None
    factor: float = 1.0

    @property
    def is_identity(self) -> bool:
        return self.factor == 1 and (self.inner is None or self.inner.is_identity)

    def position_values(self, token_ids: np.ndarray | list[int], seed: int) -> np.ndarray:
        """``factor · inner(tokens)`` (``factor · t`` without an inner scheme), float64."""
        ids = np.asarray(token_ids, dtype=np.int64)
        base = (
            np.arange(ids.size, dtype=np.float64)
            if self.inner is None
            else self.inner.position_values(ids, seed).astype(np.float64)
        )
        return base * float(self.factor)

    def row_values(self, token_ids: np.ndarray | list[int], span: int, seed: int) -> np.ndarray:
        """``factor · inner.row_values`` (``factor · t`` without an inner scheme): the inner
        scheme perturbs the row's first ``span`` tokens, the scaling moves the whole row."""
        ids = np.asarray(token_ids, dtype=np.int64)
        base = (
            np.arange(ids.size, dtype=np.float64)
            if self.inner is None
            else self.inner.row_values(ids, span, seed).astype(np.float64)
        )
        return base * float(self.factor)

    def to_string(self) -> str:
        inner = "identity" if self.inner is None else self.inner.to_string()
        return f"{inner}*{self.factor!r}"


def combined_positions(
    positions: PositionPerturbation | None, length: LengthPerturbation | None
) -> PositionPerturbation | None:
    """The position scheme a forward runs: ``positions`` scaled by the length scheme's
    position factor (None when nothing changes positions)."""
    factor = 1.0 if length is None else length.position_factor
    if factor == 1.0:
        return positions
    return InterpolatedPositions(positions, factor)
