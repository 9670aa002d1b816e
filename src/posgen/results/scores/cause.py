"""Does the additive form explain the tolerance? The scores of ``posgen cause``.

**What survives the form.** On the same ``n`` documents, with per-document
log-likelihoods ``bll_d`` (plain model) and ``ll_{c,d}`` (cell c: one form of logits,
:mod:`posgen.harness.model_side.logits.forms`, in one layer or in every layer), word counts
``w_d`` and token counts ``t_d``: ``D_c = PPL_c / PPL_plain − 1`` with the log-t interval
over documents (:func:`posgen.results.scores.layers.degradation_row`, as ``posgen layers``)
and the NLL per token ``−Σ_d ll_{c,d} / Σ_d t_d`` beside the plain one.

**The predicted change.** Per (window, scheme, layer, head) the harness returns the sums
of :mod:`posgen.harness.decomposition.predicted_change` over the changed entries E
(k = |E|, Σp, Σm, Σp², Σm², Σpm with p the predicted and m the measured logit change) and
the row means of three KLs. Pooled over heads and windows (sums added):

    r     = (k Σpm − Σp Σm) / √((k Σp² − (Σp)²)(k Σm² − (Σm)²))
    share = 1 − Σ(m − p)² / Σm² = (2 Σpm − Σp²) / Σm²
    KL explained = 1 − mean KL(P_meas ‖ P_pred) / mean KL(P_meas ‖ P_plain)

and ``coverage`` = covered / fitted entries (the form predicts nothing for a key moved
after its query). ``predicted_change`` = mean KL(P_pred ‖ P_plain) is the change of the
attention rows the form predicts; ``measured_change`` = mean KL(P_meas ‖ P_plain).

**Relation.** Per layer, ``posgen layers``' sensitivity ``s_ℓ`` against the predicted
change (and the measured change, the prediction's r, fit r, distance share) with the
within-model mirror-shift test of levels and changes
(:func:`posgen.results.scores.layers.relation`). Across models, the cross-model
correlation of :func:`posgen.results.scores.association.cross_model` (descriptive only at
n ≤ 4 models; random-init twins listed, not counted).
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import pandas as pd

from posgen.results.scores.association import cross_model
from posgen.results.scores.layers import degradation_row, relation

SUMS = ("changed", "sum_pred", "sum_meas", "sum_pred2", "sum_meas2", "sum_cross")
KLS = ("kl_measured_predicted", "kl_measured_plain", "kl_predicted_plain")
KL_ROUNDING = 1e-6  # mean row KL below which it is float32 rounding (KL explained: NaN)


def r_and_share(sums: Mapping[str, float]) -> dict[str, float]:
    """Pearson r and the share of Σm² explained from the sums of ``SUMS`` (module doc);
    NaN where nothing changed or a side is constant."""
    k, sp, sm = sums["changed"], sums["sum_pred"], sums["sum_meas"]
    var_p = k * sums["sum_pred2"] - sp * sp
    var_m = k * sums["sum_meas2"] - sm * sm
    cov = k * sums["sum_cross"] - sp * sm
    r = cov / math.sqrt(var_p * var_m) if var_p > 0 and var_m > 0 else math.nan
    m2 = sums["sum_meas2"]
    share = (2 * sums["sum_cross"] - sums["sum_pred2"]) / m2 if m2 > 0 else math.nan
    return {"r": float(r), "share": float(share)}


def nll_row(
    bll: Sequence[float], ll: Sequence[float], words: Sequence[float], tokens: Sequence[float]
) -> dict[str, float]:
    """One cell against the plain model: D with its interval, sensitivity log(1 + D), and
    NLL per token of both."""
    row = degradation_row(bll, ll, words)
    total = float(np.sum(tokens))
    return {
        **row,
        "nll": -float(np.sum(ll)) / total,
        "nll_plain": -float(np.sum(bll)) / total,
    }


def pooled_prediction(rows: pd.DataFrame, keys: Sequence[str]) -> pd.DataFrame:
    """The prediction's figures per group of ``keys`` (e.g. scheme and layer): sums of
    ``SUMS`` and of the entry counts added, KLs averaged, then r, share, coverage and KL
    explained (module doc)."""
    grouped = rows.groupby(list(keys), sort=True)
    sums = grouped[[*SUMS, "entries", "covered"]].sum()
    kls = grouped[list(KLS)].mean()
    out = pd.concat([sums, kls], axis=1).reset_index()
    derived = [r_and_share(r) for r in out.to_dict(orient="records")]
    out["r"] = [d["r"] for d in derived]
    out["share"] = [d["share"] for d in derived]
    out["coverage"] = out["covered"] / out["entries"]
    with np.errstate(invalid="ignore", divide="ignore"):
        explained = 1 - out["kl_measured_predicted"] / out["kl_measured_plain"]
    # a change at float32 rounding (a layer that barely depends on position) has no ratio
    out["kl_explained"] = explained.where(out["kl_measured_plain"] > KL_ROUNDING)
    return out.rename(
        columns={"kl_predicted_plain": "predicted_change", "kl_measured_plain": "measured_change"}
    )


def layer_relation(
    sensitivity: Mapping[int, float],
    by_layer: pd.DataFrame,
    profile_covariates: Mapping[str, Mapping[int, float]] = (),
) -> list[dict[str, Any]]:
    """The within-model relation over the layers both know: sensitivity against the
    predicted change, the measured change, the prediction's r (``by_layer``: one scheme's
    rows of :func:`pooled_prediction` by layer) and the profile's own covariates (fit r,
    distance share of ``posgen layers``)."""
    per_layer = by_layer.set_index("layer")
    layers = sorted(set(sensitivity) & {int(k) for k in per_layer.index})
    covariates: dict[str, list[float]] = {
        name: [float(per_layer.loc[k, column]) for k in layers]
        for name, column in (
            ("predicted_change", "predicted_change"),
            ("measured_change", "measured_change"),
            ("prediction_r", "r"),
        )
    }
    for name, values in dict(profile_covariates).items():
        covariates[name] = [float(values.get(k, math.nan)) for k in layers]
    return relation([sensitivity[k] for k in layers], covariates)


CROSS_X = ("predicted_change", "prediction_share")


def cross_model_rows(profiles: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Across models (each profile with a layers run): the predicted change and the
    prediction's share under the layers run's scheme against the all-layer sensitivity
    ``log(1 + D_all)`` of that run (:func:`posgen.results.scores.association.cross_model`:
    exact permutation p, descriptive only at n ≤ 4; random-init twins listed, not counted)."""

    per_model: dict[str, dict[str, float]] = {}
    twins = set()
    for prof in profiles:
        run = prof.get("layers_run")
        pred = next((r for r in prof["prediction"] if run and r["scheme"] == run["scheme"]), None)
        if pred is None:
            continue
        per_model[prof["model"]] = {
            "predicted_change": float(pred["predicted_change"]),
            "prediction_share": float(pred["share"]),
            "sensitivity_all": float(run["all_layers"]["sensitivity"]),
        }
        if prof.get("random_init"):
            twins.add(prof["model"])
    return [cross_model(per_model, x, "sensitivity_all", twins=twins) for x in CROSS_X]
