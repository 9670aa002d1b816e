"""What the additive form predicts a position perturbation does to an ALiBi model's logits
(BLOOM, MPT, Falcon), beside :mod:`.predicted_change`'s rotary path.

In an ALiBi layer positions enter through the bias alone: q and k do not depend on them.
So with only layer ℓ's positions moved to π (what ``hf-posgen layers=ℓ`` feeds it: the
bias built from π, the layer's input the plain one) its full logits are exactly

    W_π[h, i, j] = W[h, i, j] − β·m_h·[(π_i − π_j) − (i − j)]        W, W_π [H, n, n]

with β·m_h the step of the bias the model built (``AlibiCapture.bias``, ``[B, H, 1, n]``:
BLOOM's β·m_h·j, MPT's m_h·(j − n + 1) with β = 1; both forms of −β·m_h·(i − j), blind to
a per-row constant that no softmax sees). The step is read beside the bias's zero (BLOOM's
key 0, MPT's key n − 1), where it is the product m_h·1 itself, not a difference of two
rounded products. W_π is taken with the constant of the definition, so the measured change
ΔW = W_π − W is the change of −β·m_h·(i − j) itself; the KL figures, which are per row,
are the same either way. The fit of the full logits W (bias included: what ``logits=``
and the decomposition's ``logit_part=full`` fit) predicts ΔŴ = a[π_i − π_j] − a[i − j]
(:func:`.predicted_change.change_figures`); its error is what q·k made of the distance,
which a position move does not change in this layer. A model whose logits are its bias
alone is predicted exactly (r = 1). Falcon's bias is bfloat16-rounded products
bf16(m_h·j)/√d: the step is then m_h/√d, and W_π is the model's own to that rounding
(exact while m_h·π_j is a bfloat16 number, as for slopes that are powers of 2 and
positions below 256).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch

from posgen.harness.additive_fit.logit_fit import FitOptions, LayoutCache
from posgen.harness.decomposition.predicted_change import change_figures, fit_capture, head_rows
from posgen.harness.model_side.alibi.capture import AlibiCapture, alibi_capture_forward


def alibi_moved_logits(cap: AlibiCapture, positions: torch.Tensor) -> torch.Tensor:
    """W_π [H, n, n] float32 of batch row 0 (module doc): the full logits of ``cap`` with
    its bias at positions π (``positions`` [n], integers)."""
    w = cap.logits[0].float()
    n = w.shape[-1]
    if n < 2:
        return w
    step = bias_step(cap.bias[0, :, 0])
    i = torch.arange(n, device=w.device)
    pos = positions.to(w.device, torch.long)
    shift = (pos[:, None] - pos[None, :]) - (i[:, None] - i[None, :])  # [n, n]
    return w - step[:, None, None] * shift.to(w.dtype)


def bias_step(bias: torch.Tensor) -> torch.Tensor:
    """β·m_h [H] (float32) of one row's bias ``bias`` [H, n] (n ≥ 2): its step beside its
    zero column, the first (BLOOM's β·m_h·j) or the last (MPT's m_h·(j − n + 1)); a bias
    zero at neither end is refused."""
    if bool((bias[:, 0] == 0).all()):
        return (bias[:, 1] - bias[:, 0]).float()
    if bool((bias[:, -1] == 0).all()):
        return (bias[:, -1] - bias[:, -2]).float()
    raise RuntimeError(
        "the captured ALiBi bias is zero at neither its first key (BLOOM's m_h·j) nor its "
        "last (MPT's m_h·(j − n + 1)); the prediction does not know its step"
    )


class AlibiChangePredictor:
    """Consumer of :class:`AlibiCapture`\\ s (one plain captured forward of one window,
    batch 1): per layer and head, the figures of :func:`.predicted_change.change_figures`
    against W_π (module doc), rows as :class:`.predicted_change.ChangePredictor`'s."""

    def __init__(self, positions: torch.Tensor, layouts: LayoutCache | None = None) -> None:
        self.positions = positions
        self.layouts = layouts or LayoutCache()
        self.options = FitOptions()
        self.rows: list[dict[str, Any]] = []

    def __call__(self, cap: AlibiCapture) -> None:
        if cap.query.shape[0] != 1:
            raise ValueError("the prediction takes one window per forward (batch size 1)")
        fitted, fits = fit_capture(cap, self.layouts, self.options)
        w = cap.logits[0]
        moved = alibi_moved_logits(cap, self.positions)
        figures = change_figures(w, moved, fits.a, fitted, self.positions)
        self.rows.extend(head_rows(figures, cap.layer, w.shape[-1]))


def alibi_window_rows(
    model: torch.nn.Module, ids: Sequence[int], pos: torch.Tensor, layouts: LayoutCache
) -> list[dict[str, Any]]:
    """:func:`.predicted_change.predict_windows`' rows of one window under positions
    ``pos`` [n] on an ALiBi model: one plain captured forward, each layer's bias moved by
    :func:`alibi_moved_logits`."""
    predictor = AlibiChangePredictor(pos, layouts)
    alibi_capture_forward(model, list(ids), predictor)
    return predictor.rows
