"""Names of perturbed lm-eval tasks: one grammar, parsed and formatted in one place.

Grammar (``<task>`` is any lm-eval task, group or tag name)::

    perm_<scheme>_<level>[_seed<S>]_<task>     a perturbed task
    perm_<scheme>_<level>[_seed<S>]            the group over the offline suite

    level := <R>pct       swap, adjacent: R percent of the words move; the decimal point
                          is written "p": 5 -> 5pct, 0.5 -> 0p5pct, 12.25 -> 12p25pct
           | w<K>         local_shuffle: shuffle within windows of K words (w3)
           | all          shuffle: every word

Without ``_seed<S>`` the seed is :data:`DEFAULT_SEED`. Rate and seed are in the name, so
lm-eval's request cache (``--cache_requests``), which keys on the task name, never mixes
two perturbations.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation

from posgen.perturbations import PerturbationError, registry
from posgen.perturbations.text import TextPerturbation

DEFAULT_SEED = 1234
GRAMMAR = (
    "perm_<scheme>_<level>[_seed<S>][_<task>]   level: <R>pct for swap and adjacent "
    "(0.5% -> 0p5pct), w<K> for local_shuffle, all for shuffle; no _<task>: the group "
    f"over the offline suite; default seed {1234}"
)
PREFIX = "perm_"
_RATE = re.compile(r"^(\d+)(?:p(\d+))?pct$")
_SEED = re.compile(r"^seed(\d+)$")


@dataclass(frozen=True)
class PerturbedName:
    """A parsed name: the perturbation, the seed and the base task (None for a group)."""

    perturbation: TextPerturbation
    seed: int
    base_task: str | None

    @property
    def name(self) -> str:
        return format_name(self.perturbation, self.base_task, self.seed)

    @property
    def prefix(self) -> str:
        return format_name(self.perturbation, None, self.seed)


def rate_token(rate: float) -> str:
    """``0.05 -> "5pct"``, ``0.005 -> "0p5pct"`` (exact: the decimal digits of repr(rate))."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate <= 1:
        raise PerturbationError(f"rate must be a number in [0, 1], got {rate!r}")
    pct = (Decimal(repr(float(rate))) * 100).normalize()
    whole, _, frac = f"{pct:f}".partition(".")
    return f"{whole}p{frac}pct" if frac else f"{whole}pct"


def parse_rate_token(token: str) -> float:
    m = _RATE.match(token)
    if m is None:
        raise PerturbationError(f"{token!r} is not a rate; write e.g. 5pct, 0p5pct, 100pct")
    try:
        pct = Decimal(m.group(1) + ("." + m.group(2) if m.group(2) else ""))
    except InvalidOperation:
        raise PerturbationError(f"{token!r} is not a rate") from None
    return float(pct / 100)


def level_token(p: TextPerturbation) -> str:
    if "rate" in p.params:
        return rate_token(p.params["rate"])
    if p.name == "local_shuffle":
        return f"w{p.params['window']}"
    if not p.params:
        return "all"
    raise PerturbationError(f"text perturbation {p.name!r} has no task-name form")


def perturbation_from_level(scheme: str, level: str) -> TextPerturbation:
    cls = registry.get("text", scheme)
    if "rate" in {f for f in cls.__dataclass_fields__}:
        return cls(rate=parse_rate_token(level))  # type: ignore[call-arg]
    if scheme == "local_shuffle":
        if not re.fullmatch(r"w\d+", level):
            raise PerturbationError(
                f"local_shuffle takes a window: write w3, w5, ... not {level!r}"
            )
        return cls(window=int(level[1:]))  # type: ignore[call-arg]
    if level != "all":
        raise PerturbationError(f"{scheme} takes no rate: write perm_{scheme}_all_<task>")
    return cls()  # type: ignore[return-value]


def format_name(p: TextPerturbation, base_task: str | None, seed: int = DEFAULT_SEED) -> str:
    """The task (or, with ``base_task=None``, group) name of a perturbation."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise PerturbationError(f"seed must be an int >= 0, got {seed!r}")
    name = f"{PREFIX}{p.name}_{level_token(p)}"
    if seed != DEFAULT_SEED:
        name += f"_seed{seed}"
    return f"{name}_{base_task}" if base_task else name


def _schemes_longest_first() -> list[str]:
    return sorted(registry.names("text"), key=len, reverse=True)


def parse_name(name: str) -> PerturbedName | None:
    """Parse a perturbed task or group name; None when ``name`` is not of that form.

    Raises :class:`PerturbationError` when it is of that form but invalid (unknown
    scheme, bad rate), with the accepted forms.
    """
    if not name.startswith(PREFIX):
        return None
    rest = name[len(PREFIX) :]
    scheme = next((s for s in _schemes_longest_first() if rest.startswith(s + "_")), None)
    if scheme is None:
        head = rest.split("_", 1)[0]
        registry.get("text", head)  # raises with close matches
        return None
    parts = rest[len(scheme) + 1 :].split("_", 2)
    p = perturbation_from_level(scheme, parts[0])
    seed, tail = DEFAULT_SEED, parts[1:]
    if tail and _SEED.match(tail[0]):
        seed = int(tail[0][4:])
        tail = tail[1:]
    base = "_".join(tail) or None
    return PerturbedName(p, seed, base)
