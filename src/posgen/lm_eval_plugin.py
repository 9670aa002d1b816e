"""Everything posgen registers with lm-evaluation-harness, in one place."""

from __future__ import annotations

_registered = False


def register_all() -> None:
    """Register the ``hf-posgen`` model and posgen's task resolver with lm-eval (idempotent)."""
    global _registered
    if _registered:
        return
    import sys
    print("posgen hook active", sys.argv, file=sys.stderr)
    _registered = True
