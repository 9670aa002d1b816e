"""The report of ``posgen cause``: "Does the additive form explain the tolerance?".

A profile is the plain data :func:`posgen.results.scores.cause_profile.build_profile` gives: the
NLL cells against the plain model, the predicted change pooled per scheme and per
(scheme, layer), the relation to a ``posgen layers`` profile. The answer is read off three
stated checks (:func:`checks`), each with its numbers, and says "no" where they fail. A
learned-absolute model has no prediction (:func:`predicted`): the report says why. The
figure is :mod:`posgen.results.report.cause_figure`'s.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from posgen.results.report.layers import relation_table, verdict
from posgen.results.scores.association import RULE

PREDICTS = 0.5  # share of ‖ΔW‖² and of the attention-row change the form must explain
ALPHA = 0.05


def _fmt(v: Any, digits: int = 3) -> str:
    if v is None or (isinstance(v, float) and not math.isfinite(v)):
        return "n/a"
    return f"{v:.{digits}g}" if isinstance(v, float) else str(v)


NO_PREDICTION = (
    "this model's learned absolute positions enter once, before the first layer, so no "
    "layer's positions move alone"
)


def predicted(prof: Mapping[str, Any]) -> bool:
    """Whether the run made a prediction: every model but a learned-absolute one."""
    return prof.get("positions") != "absolute"


def _finite(v: Any) -> bool:
    return v is not None and isinstance(v, (int, float)) and math.isfinite(v)


def _all_layers(prof: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    return {r["form"]: r for r in prof["nll"] if r["layer"] == "all"}


def checks(prof: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The three checks of the answer, each ``{"name", "holds" (True/False/None: not
    tested), "text"}``:

    1. *carries*: with every layer replaced, the fit (``additive``) costs clearly less than
       each single term: its D's interval lies below the intervals of ``distance`` and
       ``key``;
    2. *predicts*: under every scheme the form explains at least ``PREDICTS`` of the
       measured logit change (pooled share) and of the attention-row change (KL explained);
    3. *tracks*: across layers, the predicted change is associated with ``posgen layers``'
       sensitivity (levels and changes both p ≤ ``ALPHA`` in the mirror-shift test, ρ > 0);
       not tested where either test is not estimable (too few layers).
    """
    return [_carries(prof), _predicts(prof), _tracks(prof)]


def _carries(prof: Mapping[str, Any]) -> dict[str, Any]:
    """Check 1: the fit in every layer against each single term in every layer."""
    cells = _all_layers(prof)
    fit, singles = cells.get("additive"), [cells.get(f) for f in ("distance", "key")]
    if fit is None or any(s is None for s in singles):
        return {
            "name": "carries",
            "holds": None,
            "text": "not run (needs additive, distance and key in every layer)",
        }
    holds = all(fit["ci_hi"] < s["ci_lo"] for s in singles)
    return {
        "name": "carries",
        "holds": holds,
        "text": (
            f"every layer replaced by its fit: D = {_fmt(fit['degradation'])} "
            f"[{_fmt(fit['ci_lo'])}, {_fmt(fit['ci_hi'])}]; distance term alone "
            f"{_fmt(singles[0]['degradation'])}, key term alone {_fmt(singles[1]['degradation'])}"
        ),
    }


def _predicts(prof: Mapping[str, Any]) -> dict[str, Any]:
    """Check 2: the share of the logit change and of the attention rows' change the form
    explains, under every scheme."""
    worst = [
        (p["scheme"], p["share"], p["kl_explained"])
        for p in prof["prediction"]
        if not (p["share"] >= PREDICTS and p["kl_explained"] >= PREDICTS)
    ]
    text = "; ".join(
        f"{p['scheme']}: r = {_fmt(p['r'])}, share {_fmt(p['share'])}, KL explained "
        f"{_fmt(p['kl_explained'])}, coverage {_fmt(p['coverage'])}"
        for p in prof["prediction"]
    )
    if not predicted(prof):
        text = f"does not apply: {NO_PREDICTION}"
    return {
        "name": "predicts",
        "holds": not worst if prof["prediction"] else None,
        "text": text or "no scheme moved a position",
    }


def _tracks(prof: Mapping[str, Any]) -> dict[str, Any]:
    """Check 3: the predicted change against ``posgen layers``' sensitivity across layers."""
    rel = next((r for r in prof["relation"] if r["covariate"] == "predicted_change"), None)
    if rel is None:
        text = "no --layers-run given" if predicted(prof) else "no prediction to relate"
        return {"name": "tracks", "holds": None, "text": text}
    tested = all(_finite(rel[k]) for k in ("rho", "p", "rho_changes", "p_changes"))
    holds = bool(rel["rho"] > 0 and rel["p"] <= ALPHA and rel["p_changes"] <= ALPHA)
    return {
        "name": "tracks",
        "holds": holds if tested else None,
        "text": (
            f"ρ = {_fmt(rel['rho'], 2)} (mirror-shift p = {_fmt(rel['p'])}; changes ρ = "
            f"{_fmt(rel['rho_changes'], 2)}, p = {_fmt(rel['p_changes'])}) over "
            f"{rel['n_layers']} layers"
            + ("" if tested else "; a test is not estimable at this many layers")
        ),
    }


def answer(prof: Mapping[str, Any]) -> str:
    """The plain answer: yes only when all three checks hold; no when the form does not
    predict the change or does not track sensitivity; partly otherwise."""
    if not predicted(prof):
        return "Not answered (no prediction for learned absolute positions)"
    found = {c["name"]: c["holds"] for c in checks(prof)}
    if all(v is True for v in found.values()):
        return "Yes"
    if found["predicts"] is False or found["tracks"] is False:
        return "No"
    if any(v is None for v in found.values()) and not any(v is False for v in found.values()):
        return "Not answered (a check was not run)"
    return "Partly"


CHECK_TITLES = {
    "carries": "The additive form carries what attention does",
    "predicts": "It predicts what a position perturbation does to the logits",
    "tracks": "Its predicted change tracks where the model is sensitive",
}


def answer_section(prof: Mapping[str, Any]) -> list[str]:
    lines = [f"**{answer(prof)}.**", ""]
    for c in checks(prof):
        mark = {True: "holds", False: "does not hold", None: "not tested"}[c["holds"]]
        lines.append(f"- {CHECK_TITLES[c['name']]}: **{mark}** ({c['text']}).")
    lines += [
        "",
        f"Rules: *carries* needs the fit's interval (every layer replaced) below those of "
        f"the distance and key terms alone; *predicts* needs at least {PREDICTS:g} of the "
        f"logit change's ‖ΔW‖² and of the attention rows' KL change explained under every "
        f"scheme; *tracks* needs the within-model mirror-shift test of levels and changes "
        f"at p ≤ {ALPHA} with ρ > 0. The answer is yes when all three hold and no when "
        "the form does not predict or does not track.",
    ]
    return lines


def nll_table(prof: Mapping[str, Any]) -> str:
    lines = ["| logits | NLL/token | plain | D | 95 % CI |", "|---|---|---|---|---|"]
    for r in prof["nll"]:
        if r["layer"] == "all":
            lines.append(
                f"| {r['form']} (every layer) | {_fmt(r['nll'], 4)} | {_fmt(r['nll_plain'], 4)}"
                f" | {_fmt(r['degradation'])} | [{_fmt(r['ci_lo'])}, {_fmt(r['ci_hi'])}] |"
            )
    return "\n".join(lines)


def layer_nll_table(prof: Mapping[str, Any]) -> str:
    forms = [f for f in prof["forms"]]
    by = {(r["form"], r["layer"]): r for r in prof["nll"] if r["layer"] != "all"}
    layers = sorted({k[1] for k in by})
    head = "| layer | " + " | ".join(f"D {f}" for f in forms) + " |"
    lines = [head, "|---" * (len(forms) + 1) + "|"]
    for layer in layers:
        cells = [by.get((f, layer)) for f in forms]
        lines.append(
            f"| {layer} | "
            + " | ".join(
                "n/a"
                if c is None
                else f"{_fmt(c['degradation'])} [{_fmt(c['ci_lo'])}, {_fmt(c['ci_hi'])}]"
                for c in cells
            )
            + " |"
        )
    return "\n".join(lines)


def prediction_table(rows: Sequence[Mapping[str, Any]], by_layer: bool = False) -> str:
    first = "| scheme | layer " if by_layer else "| scheme "
    lines = [
        first + "| r | share | KL explained | KL(meas‖pred) | measured change | "
        "predicted change | coverage |",
        "|---" * (8 + by_layer) + "|",
    ]
    for r in rows:
        where = f"| {r['scheme']} | {r['layer']} " if by_layer else f"| {r['scheme']} "
        lines.append(
            where + f"| {_fmt(r['r'])} | {_fmt(r['share'])} | {_fmt(r['kl_explained'])} | "
            f"{_fmt(r['kl_measured_predicted'])} | {_fmt(r['measured_change'])} | "
            f"{_fmt(r['predicted_change'])} | {_fmt(r['coverage'])} |"
        )
    return "\n".join(lines)


ALIBI_PREDICTION = (
    " ALiBi: a layer's positions enter through its bias alone, −m_h·(i − j), which is "
    "exactly additive and part of the fitted logits, so the measured change is the bias's "
    "change and the form predicts most of it by construction; what it misses is what q·k "
    "made of the distance, which a move of positions does not change."
)


def render_markdown(
    profiles: Sequence[Mapping[str, Any]], figure: str = "cause.png", cross: str = ""
) -> str:
    """The report in Markdown: per model its answer and the sections it is read from, then
    the cross-model section ``cross`` (if any)."""
    parts = ["# Does the additive form explain the tolerance?", "", f"![cause]({figure})", ""]
    for prof in profiles:
        parts += [f"## {prof['model']}", "", *answer_section(prof), ""]
        parts += survival_section(prof) + prediction_section(prof) + relation_section(prof)
    if cross:
        parts += [cross, ""]
    return "\n".join(parts)


def survival_section(prof: Mapping[str, Any]) -> list[str]:
    """What survives the additive form: D with each form in every layer, then one layer
    at a time."""
    return [
        "### What survives the additive form",
        "",
        f"{prof['documents']} posgen_prose documents; D = PPL / PPL(plain) − 1 with "
        "log-t intervals over documents. `distance` is a[i−j] + b[i] and `key` is "
        "b[i] + c[j]: b[i] is constant along a softmax row, so after the softmax they "
        "are a[i−j] and c[j] alone. `foreign` takes a[·] from another sequence's fit "
        "(the probe text); `shuffled` adds the fit's own residual, permuted within "
        "each row.",
        "",
        nll_table(prof),
        "",
        "One layer at a time:",
        "",
        layer_nll_table(prof),
        "",
    ]


def prediction_section(prof: Mapping[str, Any]) -> list[str]:
    """The predicted change against the measured one, pooled and per layer (a line
    saying why there is none for a learned-absolute model)."""
    if not predicted(prof):
        return ["### The predicted change", "", f"Not made: {NO_PREDICTION}.", ""]
    return [
        "### The predicted change",
        "",
        "ΔŴ[i, j] = a[π(i) − π(j)] − a[i − j] from the plain logits' fit against the "
        "measured change of the layer's logits when only its positions move (the "
        "sweep's draws on each window). Pooled over heads and documents."
        + (ALIBI_PREDICTION if prof.get("positions") == "alibi" else ""),
        "",
        prediction_table(prof["prediction"]),
        "",
        prediction_table(prof["prediction_layers"], by_layer=True),
        "",
    ]


def relation_section(prof: Mapping[str, Any]) -> list[str]:
    """The relation to a ``posgen layers`` profile (nothing without one)."""
    if not prof["relation"]:
        return []
    run = prof["layers_run"]
    return [
        "### Against the sensitivity profile",
        "",
        f"`posgen layers` folder {run['path']} ({run['scheme']}): per-layer "
        "sensitivity against the predicted change under that scheme, beside the "
        "measured change, the prediction's r, fit r and distance share.",
        "",
        relation_table(prof),
        "",
        verdict(prof),
        "",
    ]


def cross_model_section(rows: Sequence[Mapping[str, Any]]) -> str:
    """Markdown: the cross-model correlations of
    :func:`posgen.results.scores.cause.cross_model_rows`, read by their stated rule."""

    lines = ["## Across models", "", f"Rule: {RULE} p is two-sided.", ""]
    lines += [
        "| variables | n models | Spearman ρ (exact p) | Pearson r (exact p) | reading |",
        "|---|---|---|---|---|",
    ]
    for c in rows:
        what = f"{c['x']} vs all-layer sensitivity"
        twins = f" (+{len(c['twins'])} twin)" if c.get("twins") else ""
        if not c["estimable"]:
            lines.append(f"| {what} | {c['n']}{twins} | {c['reason']} | | |")
            continue
        cells = [f"{c[k]['r']:.2f} (p = {c[k]['p']:.3g})" for k in ("spearman", "pearson")]
        reading = (
            "descriptive only"
            if c["descriptive_only"]
            else ("relation" if c["claim"] else "no relation shown")
        )
        lines.append(f"| {what} | {c['n']}{twins} | {cells[0]} | {cells[1]} | {reading} |")
    return "\n".join(lines)
