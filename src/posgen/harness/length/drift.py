"""How far attention outputs past the trained context drift from those inside it.

For one document, layer ℓ and token t let ``o_t ∈ ℝ^hidden`` be the attention block's
output (after ``o_proj``, before the residual add) and ``u_t = o_t / ‖o_t‖``. The in-context
reference is the later half of the trained context, ``R = [C/2, C)``, where every token
has plenty of context and positions are ones the model was trained on. With the mean
reference direction ``m = Σ_{t∈R} u_t / ‖Σ_{t∈R} u_t‖``::

    c_t = ⟨u_t, m⟩                      (cosine to the in-context mean direction)
    drift_ℓ = mean_{t∈R} c_t − mean_{t≥C} c_t
    log_norm_ratio_ℓ = mean_{t≥C} log‖o_t‖ − mean_{t∈R} log‖o_t‖

Why this distance: attention outputs of a layer share a strong common direction in the
trained range; tokens past C whose attention is out of distribution (entropy blown up by
more keys, or unseen rotary angles) leave that direction, so their cosine to m drops;
the log-norm ratio catches the other failure (outputs shrinking or growing). Both are
per-token scalars, so a document needs only O(layers × buckets) sums, and documents are
the independent units for intervals. It measures the first moment of the direction
only: a change that keeps the mean direction and the norm is not seen.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import numpy as np
import torch

from posgen.harness.model_side.family import family_of
from posgen.results.scores.length_drift import DriftSums


def attention_modules(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The attention block of every layer, in layer order (the model family's own list)."""

    return family_of(model).attention_modules(model)


def token_cosines(
    output: torch.Tensor, reference: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray]:
    """``c_t`` and ``log‖o_t‖`` (``[n]`` each, float64) for one document's ``output [n, hidden]``."""
    return cosines_to(output, reference_direction(output, reference))


def reference_direction(output: torch.Tensor, reference: tuple[int, int]) -> torch.Tensor:
    """``m`` ``[hidden]`` (float64): the normalised sum of the unit outputs over ``reference``."""
    o = output.detach().double()
    unit = o / torch.linalg.vector_norm(o, dim=-1).clamp_min(1e-30)[:, None]
    mean = unit[reference[0] : reference[1]].sum(dim=0)
    return mean / torch.linalg.vector_norm(mean).clamp_min(1e-30)


def cosines_to(output: torch.Tensor, mean: torch.Tensor) -> tuple[np.ndarray, np.ndarray]:
    """``(c_t, log‖o_t‖)`` ``[m]`` each (float64) of outputs ``[m, hidden]`` against a
    reference direction ``mean``."""
    o = output.detach().double()
    norms = torch.linalg.vector_norm(o, dim=-1).clamp_min(1e-30)
    return ((o / norms[:, None]) @ mean).cpu().numpy(), torch.log(norms).cpu().numpy()


def drift_sums(
    per_layer: list[tuple[np.ndarray, np.ndarray]],
    reference: tuple[int, int],
    trained_context: int,
    width: int,
    n_buckets: int,
) -> DriftSums:
    n = per_layer[0][0].size
    t = np.arange(n)
    keep = t < width * n_buckets
    idx = t[keep] // width
    region = np.full(n, -1)
    region[reference[0] : reference[1]] = 0
    region[trained_context:] = 1

    def by(values: np.ndarray, index: np.ndarray, mask: np.ndarray, size: int) -> np.ndarray:
        return np.bincount(index[mask], weights=values[mask], minlength=size)

    return DriftSums(
        np.stack([by(c, t // width, keep, n_buckets) for c, _ in per_layer]),
        np.stack([by(g, t // width, keep, n_buckets) for _, g in per_layer]),
        np.bincount(idx, minlength=n_buckets).astype(np.float64),
        np.stack([by(c, region, region >= 0, 2) for c, _ in per_layer]),
        np.stack([by(g, region, region >= 0, 2) for _, g in per_layer]),
        np.bincount(region[region >= 0], minlength=2).astype(np.float64),
        reference,
    )


@contextmanager
def drift_capture(
    model: torch.nn.Module, trained_context: int, width: int, n_buckets: int
) -> Iterator[list[DriftSums]]:
    """Within the block, every forward of one document (``[1, n]``, n > C/2) appends a
    :class:`DriftSums` to the yielded list once all layers ran."""
    mods = attention_modules(model)
    reference = (trained_context // 2, trained_context)
    found: list[DriftSums] = []
    current: dict[int, tuple[np.ndarray, np.ndarray]] = {}

    def hook(module: torch.nn.Module, args: tuple, kwargs: dict, output: Any) -> None:
        out = output[0] if isinstance(output, tuple) else output
        if out.shape[0] != 1:
            raise RuntimeError("drift capture runs one document per forward")
        n = out.shape[1]
        if n <= reference[0]:
            return
        ref = (reference[0], min(reference[1], n))
        cos, log_norm = token_cosines(out[0], ref)
        current[int(module.layer_idx)] = (cos, log_norm)
        if len(current) == len(mods):
            layers = [current[i] for i in sorted(current)]
            found.append(drift_sums(layers, ref, trained_context, width, n_buckets))
            current.clear()

    handles = [m.register_forward_hook(hook, with_kwargs=True) for m in mods]
    try:
        yield found
    finally:
        for h in handles:
            h.remove()
