"""The x axis of an amount a run swept: the rate of text and position schemes, the σ of
feature schemes.

Tolerance is decided among the small amounts (a rate of 0.01 to 0.05), which a linear
axis squeezes into its first tenth. Every swept axis of a run report is therefore one
scale, symmetric-log: linear from 0 to the smallest amount applied (so the unperturbed
point at 0 stays on the axis, labelled ``0``), logarithmic above it, with ticks at
exactly the amounts applied. Rates and σ get the same treatment, each with its own
smallest amount; every figure of a report draws a rate (or σ) on the SAME
:class:`SweptAxis` (same scale, limits and ticks), and its label states the scale.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from posgen.perturbations import PerturbationError, registry

RATE_KINDS = ("text", "position")
SIGMA_KINDS = ("feature",)
LINSCALE = 0.5  # the linear part [0, smallest amount] spans about half a decade

ITEMS = {"text": "words", "position": "token positions"}
SIGMA_UNIT = {"rope_noise": "rope_noise: positions", "qk_noise": "qk_noise: × |q|, |k|"}


@dataclass(frozen=True)
class SweptAxis:
    """One swept amount as an x axis: ``group`` is ``rate`` (text and position kinds) or
    ``sigma`` (feature kinds); ``values`` the amounts applied (> 0, sorted); ``what`` the
    axis's first label line (what was applied, in what unit)."""

    group: str
    values: tuple[float, ...]
    what: str

    def __post_init__(self) -> None:
        if not self.values or self.values[0] <= 0:
            raise ValueError("a swept axis needs at least one amount > 0")

    @property
    def linthresh(self) -> float:
        return self.values[0]

    @property
    def label(self) -> str:
        return f"{self.what}\nsymlog scale: linear from 0 to {self.linthresh:g}, log above"

    @property
    def limits(self) -> tuple[float, float]:
        return -0.35 * self.linthresh, self.values[-1] * 1.4

    def apply(self, ax: Any) -> None:
        """Put this scale, its limits, ticks (``0`` and every amount) and label on ``ax``'s
        x axis."""
        from matplotlib.ticker import FixedLocator, NullLocator

        ax.set_xscale("symlog", linthresh=self.linthresh, linscale=LINSCALE)
        ticks = [0.0, *self.values]
        ax.xaxis.set_major_locator(FixedLocator(ticks))
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xticks(ticks, [f"{v:g}" for v in ticks], fontsize=8)
        ax.set_xlim(*self.limits)
        ax.set_xlabel(self.label, fontsize=8)


def group_of(kind: str) -> str | None:
    """``rate`` or ``sigma`` for a perturbation kind (None: not a swept kind)."""
    return "rate" if kind in RATE_KINDS else "sigma" if kind in SIGMA_KINDS else None


def swept_axes(rows: Iterable[tuple[str, str, float]]) -> dict[str, SweptAxis]:
    """The report's swept axes from the ``(kind, scheme, amount)`` of every scored cell:
    one per group that was run, keyed ``rate`` / ``sigma`` (a group not run has none)."""
    values: dict[str, set[float]] = {}
    kinds: dict[str, set[str]] = {}
    schemes: dict[str, set[tuple[str, str]]] = {}
    for kind, scheme, amount in rows:
        group = group_of(kind)
        if group is None or not amount > 0:
            continue
        values.setdefault(group, set()).add(float(amount))
        kinds.setdefault(group, set()).add(kind)
        schemes.setdefault(group, set()).add((kind, scheme))
    return {
        group: SweptAxis(group, tuple(sorted(vals)), _what(group, kinds[group], schemes[group]))
        for group, vals in values.items()
    }


def _what(group: str, kinds: set[str], schemes: set[tuple[str, str]]) -> str:
    """The axis's first label line: what was applied, in what unit."""
    if group == "sigma":
        return "σ applied (" + "; ".join(SIGMA_UNIT.get(s, s) for _, s in sorted(schemes)) + ")"
    if all(_param(k, s) == "rate" for k, s in schemes):
        items = " / ".join(ITEMS[k] for k in RATE_KINDS if k in kinds)
        return f"rate applied (fraction of {items} moved)"
    return (
        "amount applied (" + "; ".join(f"{k} {s}: {_param(k, s)}" for k, s in sorted(schemes)) + ")"
    )


def _param(kind: str, scheme: str) -> str:
    """The swept parameter of a scheme (``rate`` for swaps), ``parameter`` if unknown."""
    try:
        return registry.get(kind, scheme).short_param or "parameter"
    except PerturbationError:
        return "parameter"


def axes_of(degr) -> dict[str, SweptAxis]:
    """:func:`swept_axes` of a degradation table (every model, task and metric)."""
    return swept_axes(zip(degr["kind"], degr["scheme"], degr["rate"], strict=True))
