"""The perturbation core: a frozen dataclass per scheme, one registry for every kind.

A perturbation is a small frozen dataclass. Its fields are its parameters; it has a
stable registry ``name``, a ``kind`` (``text``, ``position``, ``feature`` or ``length``) and a
``version`` that changes whenever the same parameters would produce different output.
It validates itself on construction and describes itself as a :class:`PerturbationSpec`
that every result row carries, so a result says exactly what produced it.
"""

from __future__ import annotations

import dataclasses
import difflib
import json
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, ClassVar, TypeVar

KINDS = ("text", "position", "feature", "length")


class PerturbationError(ValueError):
    """Invalid perturbation name or parameters; the message says what is accepted."""


@dataclass(frozen=True)
class PerturbationSpec:
    """A frozen, JSON-able description of one perturbation: kind, name, version, params."""

    kind: str
    name: str
    version: int
    params: tuple[tuple[str, Any], ...]

    def to_dict(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "name": self.name,
            "version": self.version,
            "params": dict(self.params),
        }

    def to_json(self) -> str:
        """Canonical JSON (sorted keys, no spaces): stable across processes and versions."""
        return json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))

    def to_string(self) -> str:
        """The short form users type, e.g. ``swap:0.05`` (see :meth:`Registry.parse`)."""
        return registry.get(self.kind, self.name).from_params(dict(self.params)).to_string()

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> PerturbationSpec:
        return cls(
            kind=str(data["kind"]),
            name=str(data["name"]),
            version=int(data["version"]),
            params=tuple(sorted(dict(data["params"]).items())),
        )


@dataclass(frozen=True)
class Perturbation:
    """Base class of every perturbation.

    Subclasses set the class variables, declare their parameters as dataclass fields and
    implement :meth:`validate`. ``short_param`` names the one parameter that the short
    string form carries (``swap:0.05`` sets ``rate``); ``nested_param`` names a parameter
    that must not influence the random stream, so that the items perturbed at a smaller
    value are a subset of those perturbed at a larger one.
    """

    kind: ClassVar[str]
    name: ClassVar[str]
    version: ClassVar[int] = 1
    short_param: ClassVar[str | None] = None
    nested_param: ClassVar[str | None] = None
    description: ClassVar[str] = ""

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Raise :class:`PerturbationError` when a parameter is out of range."""

    @property
    def params(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}

    @property
    def spec(self) -> PerturbationSpec:
        return PerturbationSpec(
            self.kind, self.name, self.version, tuple(sorted(self.params.items()))
        )

    @property
    def is_identity(self) -> bool:
        """True when the perturbation provably changes nothing (e.g. rate 0)."""
        return False

    def stream_name(self) -> str:
        """The identity of the random stream: kind, name, version and every parameter
        except ``nested_param``. Two perturbations with the same stream name draw the
        same random numbers for the same item and seed."""
        params = {k: v for k, v in self.params.items() if k != self.nested_param}
        body = json.dumps(params, sort_keys=True, separators=(",", ":"))
        return f"{self.kind}/{self.name}/v{self.version}/{body}"

    def to_string(self) -> str:
        if self.short_param is None:
            return self.name
        return f"{self.name}:{getattr(self, self.short_param)!r}"

    @classmethod
    def from_params(cls: type[P], params: Mapping[str, Any]) -> P:
        names = {f.name for f in dataclasses.fields(cls)}
        unknown = sorted(set(params) - names)
        if unknown:
            raise PerturbationError(
                f"{cls.kind} perturbation {cls.name!r} has no parameter(s) {unknown}; "
                f"its parameters are {sorted(names)}"
            )
        return cls(**params)

    @classmethod
    def usage(cls) -> str:
        """The accepted short form, e.g. ``swap:RATE``."""
        if cls.short_param is None:
            return cls.name
        return f"{cls.name}:{cls.short_param.upper()}"


P = TypeVar("P", bound=Perturbation)


def check_rate(name: str, value: float) -> None:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0.0 <= value <= 1.0:
        raise PerturbationError(f"{name}: rate must be a number in [0, 1], got {value!r}")


def check_window(name: str, value: int) -> None:
    if isinstance(value, bool) or not isinstance(value, int) or value < 2:
        raise PerturbationError(f"{name}: window must be an int >= 2, got {value!r}")


class RateMixin:
    """Shared parts of the rate-parameterised, nested reorderings (text and position
    ``swap`` and ``adjacent``): ``rate`` ∈ [0, 1] is the short form's value and the
    expected fraction of items moved at every length, it does not select the random
    stream (nesting), and rate 0 is the identity. Put it first among
    the bases so that its ``validate`` and ``is_identity`` win."""

    short_param: ClassVar[str] = "rate"
    nested_param: ClassVar[str] = "rate"
    name: ClassVar[str]
    rate: float

    def validate(self) -> None:
        check_rate(self.name, self.rate)

    @property
    def is_identity(self) -> bool:
        return self.rate == 0


def check_nonnegative(name: str, field: str, value: float) -> None:
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float))
        or not value >= 0.0
        or value == float("inf")
    ):
        raise PerturbationError(f"{name}: {field} must be a finite number >= 0, got {value!r}")


class Registry:
    """One registry for every kind of perturbation, keyed by (kind, name)."""

    def __init__(self) -> None:
        self._classes: dict[tuple[str, str], type[Perturbation]] = {}

    def register(self, cls: type[P]) -> type[P]:
        """Class decorator; refuses a duplicate (kind, name)."""
        if cls.kind not in KINDS:
            raise PerturbationError(f"unknown kind {cls.kind!r}; kinds are {KINDS}")
        key = (cls.kind, cls.name)
        if key in self._classes and self._classes[key] is not cls:
            raise PerturbationError(
                f"{cls.kind} perturbation {cls.name!r} is already registered "
                f"by {self._classes[key].__qualname__}"
            )
        self._classes[key] = cls
        return cls

    def names(self, kind: str | None = None) -> list[str]:
        return sorted(n for k, n in self._classes if kind is None or k == kind)

    def __iter__(self) -> Iterator[type[Perturbation]]:
        return iter(self._classes[k] for k in sorted(self._classes))

    def get(self, kind: str, name: str) -> type[Perturbation]:
        if kind not in KINDS:
            raise PerturbationError(f"unknown perturbation kind {kind!r}; kinds are {list(KINDS)}")
        try:
            return self._classes[(kind, name)]
        except KeyError:
            known = self.names(kind)
            close = difflib.get_close_matches(name, known, n=3)
            hint = f" Did you mean {', '.join(repr(c) for c in close)}?" if close else ""
            raise PerturbationError(
                f"unknown {kind} perturbation {name!r}.{hint} Accepted: "
                + ", ".join(self._classes[(kind, n)].usage() for n in known)
            ) from None

    def parse(self, kind: str, text: str) -> Perturbation:
        """Build a perturbation from its short form: ``NAME`` or ``NAME:VALUE``.

        ``VALUE`` sets the scheme's ``short_param`` (an int or a float, as the field is
        declared). Examples: ``swap:0.05``, ``local_shuffle:4``, ``shuffle``, ``shift:100``.
        """
        text = text.strip()
        name, colon, value = text.partition(":")
        cls = self.get(kind, name.strip())  # an unknown name's error lists the forms
        try:
            return _build(cls, kind, text, name, bool(colon), value.strip())
        except PerturbationError as exc:
            forms = ", ".join(self._classes[(kind, n)].usage() for n in self.names(kind))
            raise PerturbationError(f"{exc}. Accepted {kind} forms: {forms}") from None

    def from_spec(self, spec: PerturbationSpec | Mapping[str, Any]) -> Perturbation:
        if not isinstance(spec, PerturbationSpec):
            spec = PerturbationSpec.from_dict(spec)
        cls = self.get(spec.kind, spec.name)
        if spec.version != cls.version:
            raise PerturbationError(
                f"{spec.kind} perturbation {spec.name!r} version {spec.version} was recorded, "
                f"but this posgen implements version {cls.version}; results are not comparable"
            )
        return cls.from_params(dict(spec.params))


def _build(
    cls: type[Perturbation], kind: str, text: str, name: str, colon: bool, value: str
) -> Perturbation:
    if cls.short_param is not None and not value:  # no silent default value
        raise PerturbationError(f"{kind} perturbation {text!r} needs a value: write {cls.usage()}")
    if cls.short_param is None:
        if colon:
            raise PerturbationError(f"{kind} perturbation {name!r} takes no value: write {name}")
        return cls()
    field_type = {f.name: f.type for f in dataclasses.fields(cls)}[cls.short_param]
    parsed = _short_value(value, cls.short_param.upper(), field_type in (int, "int"))
    if isinstance(parsed, str):
        raise PerturbationError(f"{kind} perturbation {text!r}: {parsed}; write {cls.usage()}")
    return cls(**{cls.short_param: parsed})


INT64_LIMIT = 2**63  # integer parameters (offsets, windows) become 64-bit integers


def _short_value(value: str, param: str, integer: bool) -> int | float | str:
    """A short form's value as its field takes it (an int or a float), or why it cannot
    be: a float parameter takes any number; an integer one (``param``) digits, below
    2**63 in magnitude (``1e3``, ``2.0`` and ``inf`` are numbers, not integers in digits)."""
    try:
        number = float(value)
    except ValueError:
        return f"{value!r} is not a number"
    if not integer:
        return number
    try:
        whole = int(value)
    except ValueError:
        what = "an integer written in digits" if math.isfinite(number) else "a finite integer"
        return f"{param} takes {what}, got {value!r}"
    if abs(whole) >= INT64_LIMIT:
        return f"{param} takes an integer below 2**63 (a 64-bit integer), got {value}"
    return whole


registry = Registry()
