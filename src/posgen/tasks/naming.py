"""Names of perturbed lm-eval tasks: one grammar, parsed and formatted in one place.

Grammar (``<task>`` is any lm-eval task, group or tag name)::

    perm_<scheme>_<level>[_seed<S>]_<task>     a perturbed task
    perm_<scheme>_<level>[_seed<S>]            the group over the offline suite

    level := the scheme's own level token (``TextPerturbation.level_token``):
             <R>pct       a rate (swap, adjacent): R percent; the decimal point is
                          written "p": 5 -> 5pct, 0.5 -> 0p5pct, 12.25 -> 12p25pct
           | w<K>         a window of K words (local_shuffle: w3)
           | all          a scheme without parameters (shuffle)

Without ``_seed<S>`` the seed is :data:`DEFAULT_SEED`. Rate and seed are in the name, so
lm-eval's request cache (``--cache_requests``), which keys on the task name, never mixes
two perturbations.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from posgen.perturbations import PerturbationError, registry
from posgen.perturbations.seeding import DEFAULT_SEED
from posgen.perturbations.text import TextPerturbation, parse_rate_token, rate_token

__all__ = [
    "DEFAULT_SEED",
    "PREFIX",
    "PerturbedName",
    "TaskNameError",
    "format_name",
    "grammar",
    "parse_name",
    "parse_rate_token",
    "rate_token",
]

PREFIX = "perm_"
_SEED = re.compile(r"^seed(\d+)$")


class TaskNameError(PerturbationError):
    """A perturbed task name that cannot be resolved (a bad level, an unknown base task);
    the ``lm_eval`` command shows it as one line (exit status 2) as it matches names,
    before the model loads. A ``ValueError``, as before."""

    origin = "posgen task"  # how the lm_eval command's one-line refusal names it


def grammar() -> str:
    """The name grammar, one line, with each registered text scheme's level form."""
    levels = ", ".join(
        f"{registry.get('text', n).level_grammar()} for {n}" for n in sorted(registry.names("text"))
    )
    return (
        f"perm_<scheme>_<level>[_seed<S>][_<task>]   level: {levels} (0.5% -> 0p5pct); "
        f"no _<task>: the group over the offline suite; default seed {DEFAULT_SEED}"
    )


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


def format_name(p: TextPerturbation, base_task: str | None, seed: int = DEFAULT_SEED) -> str:
    """The task (or, with ``base_task=None``, group) name of a perturbation."""
    if isinstance(seed, bool) or not isinstance(seed, int) or seed < 0:
        raise PerturbationError(f"seed must be an int >= 0, got {seed!r}")
    name = f"{PREFIX}{p.name}_{p.level_token()}"
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
    p = registry.get("text", scheme).from_level(parts[0])
    seed, tail = DEFAULT_SEED, parts[1:]
    if tail and _SEED.match(tail[0]):
        seed = int(tail[0][4:])
        tail = tail[1:]
    base = "_".join(tail) or None
    return PerturbedName(p, seed, base)
