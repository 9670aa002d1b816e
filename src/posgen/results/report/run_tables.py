"""The run report's tables: the summary (each metric's tolerance per perturbation), the
models side by side (fit quality beside tolerance), the cross-model correlations and the
degradation of every cell at each rate."""

from __future__ import annotations

import math
from typing import Any

from posgen.results.folder.config import ModelEntry, RunConfig
from posgen.results.folder.metrics import MetricSpec
from posgen.results.report.render import Block
from posgen.results.scores.association import RULE
from posgen.results.scores.metric_units import shown, threshold_text
from posgen.results.scores.scoring import FIT_COLUMNS
from posgen.results.tables.realised import realised_text


def summary_table(scores: dict[str, Any]) -> tuple[list[str], list[list[str]]]:
    """Per model and task, each plotted metric (the task's primary first): its
    unperturbed figure and, per perturbation, the tolerance on its threshold."""
    res, tol = scores["results"], scores["tolerance"]
    base = res[res["kind"] == "none"].set_index(["model", "task", "metric", "filter"])["value"]
    rows = []
    for (model, task), g in tol.groupby(["model", "task"], sort=False):
        for spec in shown(scores["metrics"].get(task, ())):
            mine = g[(g["metric"] == spec.metric) & (g["filter"] == spec.filter)]
            for r in mine.itertuples(index=False):
                rows.append(
                    [
                        model,
                        task,
                        spec.label,
                        _fmt(base.get((model, task, spec.metric, spec.filter))),
                        f"{r.kind} {r.scheme}",
                        threshold_text(r.unit, r.threshold, spec.label, bool(r.higher_is_better)),
                        f"{r.tolerance:g} [{r.tolerance_lo:g}, {r.tolerance_hi:g}]"
                        if getattr(r, "measurable", True)
                        else "not measurable: baseline at or beyond the threshold",
                        "none on grid" if _missing(r.crossing) else f"{r.crossing:.3g}",
                        _fmt(r.auc),
                    ]
                )
    return (
        [
            "model",
            "task",
            "metric",
            "unperturbed",
            "perturbation",
            "threshold",
            "tolerance [range]",
            "crossing",
            "AUC",
        ],
        rows,
    )


def _missing(x: Any) -> bool:
    return x is None or (isinstance(x, float) and math.isnan(x))


def _fmt(x: Any, digits: int = 4) -> str:
    return "n/a" if _missing(x) else f"{x:.{digits}g}"


def models_table(cfg: RunConfig, scores: dict[str, Any]) -> tuple[list[str], list]:
    """One row per model: fit quality and, on the first task, tolerance and AUC per kind."""
    summary = scores["summary"]
    task = (cfg.tasks or ("",))[0]
    kinds = [k for k in ("text", "position", "feature") if f"{task}|{k}" in summary]
    rows = []
    for m in twins_beside(list(cfg.models)):
        f = scores["fit"].get(m.label, {})
        row = [
            m.label,
            "yes" if m.random_init else "no",
            *(_fmt(f.get(c), 3) if f else "not run" for c in FIT_COLUMNS),
        ]
        for k in kinds:
            v = summary[f"{task}|{k}"].get(m.label, {})
            row += [_fmt(v.get("tolerance")), _band(v, "tolerance_interp"), _fmt(v.get("auc"), 3)]
        rows.append(row)
    header = ["model", "random init", "mean r (3-axis)", "2-axis", "distance+key"]
    for k in kinds:
        header += [f"{k} tolerance", f"{k} crossing [95% band]", f"{k} AUC"]
    return header, rows


def _band(v: dict[str, Any], key: str) -> str:
    if _missing(v.get(key)):
        return "n/a"
    lo, hi = v.get(f"{key}_lo"), v.get(f"{key}_hi")
    band = "" if _missing(lo) or _missing(hi) else f" [{lo:.3g}, {hi:.3g}]"
    return f"{v[key]:.3g}{band}"


def twins_beside(models: list[ModelEntry]) -> list[ModelEntry]:
    """Models in config order, each random-init twin right after the model it copies."""
    labels = {m.label for m in models}
    base = [m for m in models if not (m.random_init and _twin_of(m) in labels)]
    out = []
    for m in base:
        out.append(m)
        out += [t for t in models if t.random_init and _twin_of(t) == m.label]
    return out


def _twin_of(m: ModelEntry) -> str:
    return m.label.removesuffix("+random-init")


def correlation_blocks(scores: dict[str, Any]) -> list[Block]:

    corr = scores["cross_model"]
    if not any(c["estimable"] for c in corr):
        n = max((c["n"] for c in corr), default=0)
        return [
            (
                "p",
                f"Not estimable: {n} model(s) with both a fit and a tolerance (random-init "
                "twins not counted); a correlation across models needs at least 3, so no "
                "number is given.",
            )
        ]
    rows = []
    for c in corr:
        cells = [c.get("reason", ""), "", "", ""]
        if c["estimable"]:
            cells = [f"{c[k]['r']:.2f} (p = {c[k]['p']:.3g})" for k in ("spearman", "pearson")]
            spread = c["spearman"].get("doc_resampled", {}).get("band", [None, None])
            cells.append("n/a" if spread[0] is None else f"[{spread[0]:.2f}, {spread[1]:.2f}]")
            cells.append(
                "descriptive only"
                if c["descriptive_only"]
                else ("relation" if c["claim"] else "no relation shown")
            )
        twins = f" (+{len(c['twins'])} twin)" if c.get("twins") else ""
        rows.append([c["task"], c["kind"], f"r_3axis vs {c['y']}", f"{c['n']}{twins}", *cells])
    head = ["task", "kind", "variables", "n models", "Spearman ρ (exact p)", "Pearson r (exact p)"]
    head += ["ρ over document resamples", "reading"]
    return [("p", f"Rule: {RULE} p is two-sided."), ("table", head, rows)]


UNIT_TEXT = {"relative": "relative", "bits": "bits/byte", "fraction": "[0, 1]", "metric": "own"}


def detail_table(scores: dict[str, Any]) -> tuple[list[str], list[list[str]]]:

    res = scores["results"]
    realised = res.drop_duplicates(["model", "task", "kind", "scheme", "rate"]).set_index(
        ["model", "task", "kind", "scheme", "rate"]
    )
    rows = []
    for r in scores["degradation"].itertuples(index=False):
        key = (r.model, r.task, r.kind, r.scheme, r.rate)
        rows.append(
            [
                r.model,
                r.task,
                MetricSpec(r.metric, r.filter).label,
                f"{r.kind} {r.scheme}",
                f"{r.rate:g}",
                realised_text(realised.loc[key]) if key in realised.index else "not recorded",
                f"{r.degradation:+.4f} ({UNIT_TEXT.get(r.unit, r.unit)})",
                f"[{r.ci_lo:+.4f}, {r.ci_hi:+.4f}] {r.interval}",
                str(r.n),
                _consistency(r),
            ]
        )
    head = ["model", "task", "metric", "perturbation", "rate/σ", "realised", "degradation"]
    return ([*head, "95% CI", "docs", "choice unchanged [95% CI]"], rows)


def _consistency(r: Any) -> str:
    c = getattr(r, "consistency", math.nan)
    if _missing(c):
        return ""
    return f"{c:.2f} [{r.consistency_lo:.2f}, {r.consistency_hi:.2f}]"
