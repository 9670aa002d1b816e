"""The evidence-depth part of a run's config (``posgen run --kinds depth``):
:class:`DepthSweep` (depths, tasks, the account's documents, the lengths of
``--depth-lengths``) and :class:`DepthLength`. ``to_dict()`` gives the dicts of earlier
releases where the newer fields are unset, so a run's folder name is unchanged.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any


@dataclass(frozen=True)
class DepthLength:
    """One length of ``--depth-lengths`` on one built-in depth task: the length as asked
    (a fraction of the model's trained context C, or tokens), its target in tokens, and
    the variant chosen for it (:func:`posgen.tasks.depth_lengths.passages_for_length`)."""

    asked: str  # as given: "0.5" (of C) or "512" (tokens)
    fraction: float | None  # the fraction of C asked (None: a number of tokens)
    target_tokens: int
    base_task: str
    task: str  # the variant run, e.g. posgen_kv_n120
    n_passages: int
    mean_tokens: float  # its documents' mean context length, in the model's tokens
    max_tokens: int

    def title(self) -> str:
        """``posgen_kv at 0.5 C (n120, 1,180 tokens)``: the variant's panel title."""
        at = (
            f"{self.fraction:g} C"
            if self.fraction is not None
            else f"{self.target_tokens:,} tokens"
        )
        return f"{self.base_task} at {at} (n{self.n_passages}, {self.mean_tokens:,.0f} tokens)"

    def to_dict(self) -> dict[str, Any]:
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True)
class DepthSweep:
    """The evidence-depth cells of a run (``--kinds depth``): each depth D of ``depths``
    in both forms (text: the task ``perm_depth_<D>pct_<task>``; position: ``hf-posgen
    positions=depth:D`` on the task as it is) on each of ``tasks``. D is where the
    evidence sits, not a rate: these cells stay out of the rate axes (docs/depth.md)."""

    depths: tuple[float, ...]
    tasks: tuple[str, ...]
    # --depth-account N: documents per task of the decomposition's account (0: none)
    account_docs: int = 0
    # --depth-lengths: the model's trained context C and each (length, task) chosen; the
    # tasks are then the variants (posgen_kv_n120). Absent without it.
    context: int | None = None
    lengths: tuple[DepthLength, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"depths": list(self.depths), "tasks": list(self.tasks)}
        if self.account_docs:  # absent otherwise: a sweep without it names its folder as before
            out["account_docs"] = self.account_docs
        if self.lengths:
            out["context"] = self.context
            out["lengths"] = [length.to_dict() for length in self.lengths]
        return out

    def titles(self) -> dict[str, str]:
        """Each variant task -> its length's title (the first length that chose it)."""
        titles: dict[str, str] = {}
        for length in self.lengths:
            titles.setdefault(length.task, length.title())
        return titles

    @classmethod
    def from_dict(cls, d: Mapping[str, Any] | None) -> DepthSweep | None:
        """The sweep of a stored ``config["depth"]`` (None where the run has none)."""
        if d is None:
            return None
        return cls(
            tuple(float(v) for v in d["depths"]),
            tuple(d["tasks"]),
            int(d.get("account_docs", 0)),
            d.get("context"),
            tuple(DepthLength(**length) for length in d.get("lengths", ())),
        )
