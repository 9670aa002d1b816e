"""One content field of a doc and the part of it that stays fixed.

A :class:`FieldSpec` may protect part of a field: ``keep_last`` final words stay in
place (LAMBADA's last word is its target), ``after`` keeps everything up to and
including the first occurrence of a marker (HellaSwag's ``"<activity label>: "``),
``before`` keeps everything from the first occurrence of a marker on (WinoGrande's
blank ``_`` and the scored continuation after it).
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class FieldSpec:
    """One content field of a doc and the part of it that stays fixed."""

    name: str
    keep_last: int = 0
    after: str | None = None
    before: str | None = None

    def split(self, value: str) -> tuple[str, str, str]:
        """(fixed prefix, movable middle, fixed suffix) of a field value."""
        head, body, tail = "", value, ""
        if self.after is not None and self.after in body:
            i = body.index(self.after) + len(self.after)
            head, body = body[:i], body[i:]
        if self.before is not None and self.before in body:
            i = body.index(self.before)
            body, tail = body[:i], body[i:]
        return head, body, tail

    def to_dict(self) -> dict[str, object]:
        """``{"name": ...}`` plus the parameters that are set."""
        return {k: v for k, v in vars(self).items() if v not in (None, 0) or k == "name"}

    @property
    def protects(self) -> bool:
        """Whether part of the field stays fixed."""
        return bool(self.keep_last) or self.after is not None or self.before is not None

    def describe(self) -> str:
        """``text`` or ``text (final 1 word kept)``, for messages and listings."""
        kept = []
        if self.after is not None:
            kept.append(f"after {self.after!r}")
        if self.before is not None:
            kept.append(f"before {self.before!r}")
        if self.keep_last:
            kept.append(f"final {self.keep_last} word{'s' * (self.keep_last > 1)} kept")
        return f"{self.name} ({', '.join(kept)})" if kept else self.name
