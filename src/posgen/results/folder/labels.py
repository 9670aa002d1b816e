"""Short model labels: what folder names, tables and printed output call a model."""

from __future__ import annotations

from pathlib import Path


def short_labels(names: list[str]) -> list[str]:
    """Names for folders, tables and printed output: a local folder by the fewest trailing
    path parts that tell it apart from the others (``/home/me/models/llama`` -> ``llama``),
    never the user's absolute path (that stays in the config as ``path``); a hub id as is."""
    parts = [
        Path(n).expanduser().resolve().parts if Path(n).expanduser().is_dir() else (n,)
        for n in names
    ]
    labels = list(names)
    for k in range(1, max((len(p) for p in parts), default=1) + 1):
        labels = ["/".join(p[-k:]) for p in parts]
        local = {p: lab for lab, p in zip(labels, parts, strict=True) if len(p) > 1}
        if len(set(local.values())) == len(local):  # the same folder twice is caught later
            break
    return labels
