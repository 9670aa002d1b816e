"""The figure of the ``posgen cause`` report: per model a row of three panels (the
NLL of one layer's logits replaced, the prediction's share per layer, the measured and
predicted change per layer beside the layers run's sensitivity); a model without a
prediction (learned absolute positions) gets the first panel only."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from posgen.results.report.cause import PREDICTS, predicted
from posgen.results.report.plots import new_figure, png_bytes

FORM_STYLE = {"additive": "tab:blue", "distance": "tab:orange", "key": "tab:green"}


def cause_figure(profiles: Sequence[Mapping[str, Any]]) -> bytes:
    """Per model a row of three panels: D per layer (one layer replaced, each form); the
    prediction's share per layer (each scheme); measured and predicted change per layer
    (last scheme), with the layers run's sensitivity scaled to its largest value."""
    fig, axes = new_figure(len(profiles), 3, figsize=(15, 3.6 * len(profiles)))
    for row, prof in zip(axes, profiles, strict=True):
        _nll_panel(row[0], prof)
        if not predicted(prof):
            for ax in row[1:]:
                ax.text(0.5, 0.5, "no prediction\n(learned absolute positions)", ha="center")
                ax.set_axis_off()
            continue
        _share_panel(row[1], prof)
        _change_panel(row[2], prof)
    fig.tight_layout()
    return png_bytes(fig)


def _nll_panel(ax, prof: Mapping[str, Any]) -> None:
    for form in prof["forms"]:
        rows = [r for r in prof["nll"] if r["form"] == form and r["layer"] != "all"]
        if not rows:
            continue
        x = np.array([r["layer"] for r in rows], dtype=float)
        d = np.array([r["degradation"] for r in rows])
        err = [d - np.array([r["ci_lo"] for r in rows]), np.array([r["ci_hi"] for r in rows]) - d]
        ax.errorbar(
            x, d, yerr=err, marker=".", lw=1, capsize=2, label=form, color=FORM_STYLE.get(form)
        )
    ax.axhline(0, color="grey", lw=0.5)
    ax.set_xlabel("layer replaced")
    ax.set_ylabel("D = PPL / PPL(plain) − 1")
    ax.set_title(f"{prof['model']}: logits replaced in one layer", fontsize=9)
    if ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize=7)


def _share_panel(ax, prof: Mapping[str, Any]) -> None:
    for scheme in prof["schemes"]:
        rows = [r for r in prof["prediction_layers"] if r["scheme"] == scheme]
        x = [r["layer"] for r in rows]
        ax.plot(x, [r["share"] for r in rows], marker=".", lw=1, label=f"share, {scheme}")
        ax.plot(
            x, [r["kl_explained"] for r in rows], ls="--", lw=1, label=f"KL explained, {scheme}"
        )
    ax.axhline(PREDICTS, color="grey", lw=0.5, ls=":")
    ax.set_xlabel("layer")
    ax.set_ylabel("explained by the additive form")
    ax.set_title("predicted vs measured change", fontsize=9)
    ax.legend(fontsize=7)


def _change_panel(ax, prof: Mapping[str, Any]) -> None:
    run = prof.get("layers_run")
    scheme = run["scheme"] if run else prof["schemes"][-1]
    rows = [r for r in prof["prediction_layers"] if r["scheme"] == scheme]
    x = [r["layer"] for r in rows]
    ax.plot(x, [r["measured_change"] for r in rows], marker=".", lw=1, label="measured change")
    ax.plot(x, [r["predicted_change"] for r in rows], marker=".", lw=1, label="predicted change")
    ax.set_xlabel("layer")
    ax.set_ylabel(f"mean KL of attention rows ({scheme})")
    ax.set_title("attention-row change per layer", fontsize=9)
    if run:
        right = ax.twinx()
        s = np.array([r["sensitivity"] for r in run["layers"]])
        top = np.nanmax(np.abs(s)) if np.isfinite(s).any() else 1.0
        right.plot(
            [r["layer"] for r in run["layers"]],
            s / (top or 1.0),
            color="tab:red",
            lw=1,
            alpha=0.7,
            label="sensitivity (scaled)",
        )
        right.set_ylabel("posgen layers sensitivity, scaled")
        right.legend(fontsize=7, loc="upper right")
    ax.legend(fontsize=7, loc="upper left")
