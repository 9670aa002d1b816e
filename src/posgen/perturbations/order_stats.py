"""How much a reordering really changed the order of a sequence."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass

import numpy as np


@dataclass(frozen=True)
class OrderStats:
    """Order-change statistics of one perturbed item.

    - ``n``: number of items (words or tokens).
    - ``fraction_moved``: share of items the scheme selected to move (e.g. 2·pairs/n).
    - ``mean_displacement``: mean |new index − old index| over all items.
    - ``dnd``: share of items whose right neighbour changed, over the n−1 items that had
      one (the last item of the original order is not counted).
    - ``idc``: share of items not at their original index.
    """

    n: int
    fraction_moved: float
    mean_displacement: float
    dnd: float
    idc: float

    def to_dict(self) -> dict[str, float]:
        return asdict(self)


def order_stats(perm: np.ndarray, n_selected: int) -> OrderStats:
    """Statistics of ``perm`` (slot t holds original item perm[t])."""
    perm = np.asarray(perm, dtype=np.int64)
    n = int(perm.size)
    if n == 0:
        return OrderStats(0, 0.0, 0.0, 0.0, 0.0)
    idx = np.arange(n)
    displacement = np.abs(perm - idx)
    if n > 1:
        inv = np.empty(n, dtype=np.int64)
        inv[perm] = idx  # inv[i] = slot of original item i
        slot = inv[:-1]  # slots of items 0..n-2 (those with a right neighbour)
        nxt = np.full(n - 1, -1, dtype=np.int64)
        has_next = slot + 1 < n
        nxt[has_next] = perm[slot[has_next] + 1]
        dnd = float(np.mean(nxt != idx[1:]))
    else:
        dnd = 0.0
    return OrderStats(
        n=n,
        fraction_moved=n_selected / n,
        mean_displacement=float(displacement.mean()),
        dnd=dnd,
        idc=float(np.mean(displacement != 0)),
    )


def combine_stats(parts: Sequence[OrderStats]) -> OrderStats:
    """Statistics of several independently reordered sequences (e.g. the content fields
    of one doc) taken together, with no item moving across sequences.

    With n_k items, s_k = fraction_moved_k·n_k selected items in part k:
    fraction_moved = Σ s_k / Σ n_k, mean_displacement and idc are the n_k-weighted means,
    dnd the (n_k − 1)-weighted mean (each part's last item has no right neighbour).
    """
    n = sum(p.n for p in parts)
    if n == 0:
        return OrderStats(0, 0.0, 0.0, 0.0, 0.0)
    selected = sum(round(p.fraction_moved * p.n) for p in parts)
    pairs = sum(max(p.n - 1, 0) for p in parts)
    dnd = sum(p.dnd * max(p.n - 1, 0) for p in parts) / pairs if pairs else 0.0
    return OrderStats(
        n=n,
        fraction_moved=selected / n,
        mean_displacement=sum(p.mean_displacement * p.n for p in parts) / n,
        dnd=dnd,
        idc=sum(p.idc * p.n for p in parts) / n,
    )
