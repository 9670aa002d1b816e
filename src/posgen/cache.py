"""posgen's cache folder (the embedded model, lm-eval's task index, the names it knows)."""

from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """posgen's cache: ``$POSGEN_CACHE``, else ``$XDG_CACHE_HOME/posgen``, else ~/.cache/posgen."""
    if os.environ.get("POSGEN_CACHE"):
        return Path(os.environ["POSGEN_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "posgen"
