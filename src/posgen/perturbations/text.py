"""Word-order perturbations of text.

Words are the whitespace-separated tokens of a text (punctuation stays attached to its
word); the whitespace between them is kept exactly, so only the order of the words
changes. ``rate`` is the expected fraction of words moved, at every text length (see
:class:`WordSwap`). A text with fewer than two movable
words passes through unchanged (and :attr:`TextResult.too_short` says so).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any, ClassVar

import numpy as np

from posgen.perturbations import orderings
from posgen.perturbations.base import (
    Perturbation,
    PerturbationError,
    RateMixin,
    check_window,
    registry,
)
from posgen.perturbations.order_stats import OrderStats, order_stats
from posgen.perturbations.seeding import content_key, item_rng

_WORD = re.compile(r"\S+")
_RATE_TOKEN = re.compile(r"^(\d+)(?:p(\d+))?pct$")


def rate_token(rate: float) -> str:
    """``0.05 -> "5pct"``, ``0.005 -> "0p5pct"`` (exact: the decimal digits of repr(rate))."""
    if isinstance(rate, bool) or not isinstance(rate, (int, float)) or not 0 <= rate <= 1:
        raise PerturbationError(f"rate must be a number in [0, 1], got {rate!r}")
    pct = (Decimal(repr(float(rate))) * 100).normalize()
    whole, _, frac = f"{pct:f}".partition(".")
    return f"{whole}p{frac}pct" if frac else f"{whole}pct"


def parse_rate_token(token: str) -> float:
    """The inverse of :func:`rate_token` (``"0p5pct" -> 0.005``)."""
    m = _RATE_TOKEN.match(token)
    if m is None:
        raise PerturbationError(f"{token!r} is not a rate; write e.g. 5pct, 0p5pct, 100pct")
    try:
        pct = Decimal(m.group(1) + ("." + m.group(2) if m.group(2) else ""))
    except InvalidOperation:
        raise PerturbationError(f"{token!r} is not a rate") from None
    return float(pct / 100)


@dataclass(frozen=True)
class LevelForm:
    """How one kind of short parameter reads in a task name."""

    grammar: str  # for the help text, e.g. "<R>pct"
    format_fn: Callable[[Any], str]
    parse_fn: Callable[[str], Any] | None  # None: a regex on "w<K>"-like tokens below

    def format(self, value: Any) -> str:
        return self.format_fn(value)

    def parse(self, scheme: str, token: str) -> Any:
        return self.parse_fn(token) if self.parse_fn else _parse_window(scheme, token)


def _parse_window(scheme: str, token: str) -> int:
    if not re.fullmatch(r"w\d+", token):
        raise PerturbationError(f"{scheme} takes a window: write w3, w5, ... not {token!r}")
    return int(token[1:])


#: Task-name forms of the short parameters (``perm_swap_5pct``, ``perm_local_shuffle_w3``).
#: A new text scheme whose short parameter is a rate or a window needs nothing else.
LEVEL_FORMS: dict[str, LevelForm] = {
    "rate": LevelForm("<R>pct", rate_token, parse_rate_token),
    "window": LevelForm("w<K>", lambda w: f"w{w}", None),
    "depth": LevelForm("<D>pct", rate_token, parse_rate_token),  # depth 0.5 -> 50pct
}


@dataclass(frozen=True)
class TextResult:
    """A perturbed text and how much its word order changed."""

    text: str
    stats: OrderStats
    too_short: bool


def split_words(text: str) -> tuple[list[str], list[str]]:
    """Split into words and the n+1 whitespace runs around them (first and last may be '')."""
    words = _WORD.findall(text)
    gaps = _WORD.split(text)
    return words, gaps


def join_words(words: list[str], gaps: list[str]) -> str:
    out = [gaps[0]]
    for word, gap in zip(words, gaps[1:], strict=True):
        out.append(word)
        out.append(gap)
    return "".join(out)


@dataclass(frozen=True)
class TextPerturbation(Perturbation):
    """A reordering of words. Subclasses implement :meth:`reorder`."""

    kind: ClassVar[str] = "text"
    #: what the scheme moves: ``words`` of the content fields, or a document's
    #: ``passages`` (:mod:`posgen.perturbations.depth`, whose tasks are built apart)
    moves: ClassVar[str] = "words"

    def reorder(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, int]:
        raise NotImplementedError

    def level_token(self) -> str:
        """The level in a perturbed task name (``perm_<scheme>_<level>``): ``all`` for a
        scheme without parameters, else its short parameter in the form of
        :data:`LEVEL_FORMS` (``swap:0.05`` -> ``5pct``, ``local_shuffle:3`` -> ``w3``)."""
        if self.short_param is None:
            return "all"
        if self.short_param not in LEVEL_FORMS:
            raise PerturbationError(f"text perturbation {self.name!r} has no task-name form")
        return LEVEL_FORMS[self.short_param].format(getattr(self, self.short_param))

    @classmethod
    def from_level(cls, level: str) -> TextPerturbation:
        """The inverse of :meth:`level_token`; errors name the accepted form."""
        if cls.short_param is None:
            if level != "all":
                raise PerturbationError(
                    f"{cls.name} takes no rate: write perm_{cls.name}_all_<task>"
                )
            return cls()
        form = LEVEL_FORMS.get(cls.short_param)
        if form is None:
            raise PerturbationError(f"text perturbation {cls.name!r} has no task-name form")
        return cls(**{cls.short_param: form.parse(cls.name, level)})

    @classmethod
    def level_grammar(cls) -> str:
        """How the level reads in a task name, for the grammar (``<R>pct``, ``w<K>``, ``all``)."""
        return "all" if cls.short_param is None else LEVEL_FORMS[cls.short_param].grammar

    def apply(
        self, text: str, seed: int, key: bytes | str | None = None, keep_last: int = 0
    ) -> TextResult:
        """Perturb ``text``.

        Args:
            text: the text to perturb.
            seed: the global seed.
            key: the item's identity for seeding; default: the SHA-256 of ``text``.
            keep_last: number of final words that stay in place (e.g. 1 for LAMBADA,
                whose last word is the target); they are not counted as movable.
        """
        if not isinstance(text, str):
            raise TypeError(f"{self.name}: expected a str, got {type(text).__name__}")
        if isinstance(keep_last, bool) or not isinstance(keep_last, int) or keep_last < 0:
            raise PerturbationError(f"keep_last must be an int >= 0, got {keep_last!r}")
        if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
            raise TypeError(f"{self.name}: seed must be an int, got {seed!r}")
        words, gaps = split_words(text)
        n_movable = max(len(words) - keep_last, 0)
        if n_movable < 2 or self.is_identity:
            ident = np.arange(n_movable, dtype=np.int64)
            return TextResult(text, order_stats(ident, 0), too_short=n_movable < 2)
        rng = item_rng(seed, self.stream_name(), content_key(text) if key is None else key)
        perm, n_selected = self.reorder(n_movable, rng)
        moved = [words[i] for i in perm] + words[n_movable:]
        return TextResult(join_words(moved, gaps), order_stats(perm, n_selected), False)


@registry.register
@dataclass(frozen=True)
class WordSwap(RateMixin, TextPerturbation):
    """Swap random disjoint pairs of words so that the expected fraction moved is ``rate``.

    With n movable words and one uniform u ∈ [0, 1) per text from the rate-free stream,
    ``pairs = min(⌊rate·n/2 + u⌋, ⌊n/2⌋)``; the fraction moved is ``2·pairs/n`` and its
    expectation over u is ``rate`` at every n (below ⌊n/2⌋ pairs). A 40-word text at
    rate 0.02 thus gets one pair (fraction 0.05) with probability 0.4 and none otherwise.
    Nested across rates: the pairs swapped at a rate are a subset of those at any
    higher rate. Version 2 (version 1 swapped ⌊rate·n/2⌋ pairs, so short texts moved
    nothing at small rates).
    """

    name: ClassVar[str] = "swap"
    version: ClassVar[int] = 2
    rate: float = 0.05

    def reorder(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, int]:
        return orderings.swap_pairs(n, self.rate, rng)


@registry.register
@dataclass(frozen=True)
class AdjacentSwap(RateMixin, TextPerturbation):
    """Swap disjoint pairs of neighbouring words; the expected fraction moved is ``rate``.

    ``pairs = min(⌊rate·n/2 + u⌋, ⌊n/2⌋)`` as for :class:`WordSwap`, chosen among the
    tiles (0,1), (2,3), ...; nested across rates. Version 2 (stochastic rounding).
    """

    name: ClassVar[str] = "adjacent"
    version: ClassVar[int] = 2
    rate: float = 0.05

    def reorder(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, int]:
        return orderings.adjacent_pairs(n, self.rate, rng)


@registry.register
@dataclass(frozen=True)
class LocalShuffle(TextPerturbation):
    """Shuffle the words within consecutive windows of ``window`` words."""

    name: ClassVar[str] = "local_shuffle"
    short_param: ClassVar[str] = "window"
    window: int = 3

    def validate(self) -> None:
        check_window(self.name, self.window)

    def reorder(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, int]:
        return orderings.local_shuffle(n, self.window, rng)


@registry.register
@dataclass(frozen=True)
class WordShuffle(TextPerturbation):
    """Shuffle all words."""

    name: ClassVar[str] = "shuffle"

    def reorder(self, n: int, rng: np.random.Generator) -> tuple[np.ndarray, int]:
        return orderings.full_shuffle(n, rng)
