"""Scores of the decomposition's account of the depth curve (docs/depth.md).

The account (:mod:`posgen.harness.decomposition.depth_account`) leaves two tables per
model: ``values`` (per task, depth D, document and logits form of :data:`LOGIT_FORMS`,
the gold continuation's log-likelihood ``ll`` and whether it is greedy) and ``masses``
(per task, depth, document, layer and head, the question's attention mass on the
evidence, measured and under each form of the exact fit, :data:`MASS_FORMS`).

**The curve per form.** :func:`account_documents` makes the values a documents frame of
:mod:`posgen.results.scores.depth` (``form`` is the logits form; metrics ``perplexity``,
the gold NLL −ll in nats, and ``acc``), so the curve, the gaps and their paired
intervals are that module's. Per form f the gap's difference from plain,
Δ_f = gap_f − gap_plain, comes from the per-document gaps (paired; for ``acc`` from two
sums in [0, 2] as :mod:`.depth_forms` does).

**The statement per form** (:func:`form_verdict`), from three 95 % intervals: plain's gap
P, the form's gap F and Δ_f ("excludes 0": the interval lies on one side of 0):

1. P holds 0: there is no gap under plain to account for: ``cannot be told``;
2. F excludes 0 on P's side and Δ_f holds 0: the form **keeps** the gap;
3. F excludes 0 on P's side and Δ_f excludes 0: it keeps a gap **of another size**;
4. F holds 0 or lies on the other side, and Δ_f excludes 0: it **loses** the gap;
5. anything else: ``cannot be told``.

The fitted form **explains** the curve when ``additive`` keeps the gap, **partly** when it
keeps one of another size, **does not** when it loses it; otherwise cannot be told.

**The mass.** Per document, depth and layer the heads' mean mass; per (model, task,
layer, form) and depth its mean over documents with the t interval, and the mass's gap
``mass(0.5) − (mass(0) + mass(1)) / 2`` with its paired interval; the same on the mean
over layers (:func:`mass_summary`), with each fit form's gap minus the measured gap.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from posgen.results.scores.depth import (
    DOC_COLUMNS,
    ENDS,
    MIDDLE,
    by_depth,
    depth_scores,
    mean_interval,
    paired_difference,
)

LOGIT_FORMS = ("plain", "additive", "distance", "key")
FIT_FORMS = ("additive", "distance", "key")
MASS_FORMS = ("measured", *FIT_FORMS)
METRICS = ("perplexity", "acc")  # the gold NLL (nats) and whether it is greedy
VERDICTS = ("keeps", "keeps another size", "loses", "cannot be told")
EXPLAINS = {
    "keeps": "explains",
    "keeps another size": "partly explains",
    "loses": "does not explain",
}


def account_documents(values) -> Any:
    """The account's ``values`` as a documents frame (:data:`DOC_COLUMNS`): per row two
    documents, the gold NLL −ll (``perplexity``, continuous, lower is better) and the
    greedy match (``acc``, 0/1, higher is better); ``form`` is the logits form."""
    import pandas as pd

    ids = {"model": values["model"].to_numpy(str), "task": values["task"].to_numpy(str),
           "filter": "none", "form": values["form"].to_numpy(str),
           "depth": values["depth"].to_numpy(float),
           "doc_key": values["doc_key"].to_numpy(str)}  # fmt: skip
    nll = pd.DataFrame({**ids, "metric": "perplexity", "value": -values["ll"].to_numpy(float),
                        "binary": False, "higher_is_better": False})  # fmt: skip
    acc = pd.DataFrame({**ids, "metric": "acc", "value": values["greedy"].to_numpy(float),
                        "binary": True, "higher_is_better": True})  # fmt: skip
    return pd.concat([nll, acc], ignore_index=True)[DOC_COLUMNS]


def _side(r: dict | None) -> int:
    if r is None or not (math.isfinite(r["ci_lo"]) and math.isfinite(r["ci_hi"])):
        return 0
    return 1 if r["ci_lo"] > 0 else -1 if r["ci_hi"] < 0 else 0


def form_verdict(plain: dict | None, form: dict | None, diff: dict | None) -> str:
    """One of :data:`VERDICTS` from plain's gap, the form's gap and their difference."""
    p, f, d = _side(plain), _side(form), _side(diff)
    if p == 0:
        return "cannot be told"
    if f == p:
        return "keeps" if d == 0 else "keeps another size"
    return "loses" if d != 0 else "cannot be told"


def _gap_vectors(docs, form: str) -> tuple[np.ndarray, np.ndarray] | None:
    """(middle, ends' mean) per document of one form, documents sorted; None without
    depths 0, 0.5 and 1."""
    table = by_depth(docs[docs["form"] == form], form)
    if not all(d in table for d in (MIDDLE, *ENDS)):
        return None
    keys = sorted(table[MIDDLE])
    mid = np.array([table[MIDDLE][k] for k in keys])
    ends = np.array([table[0.0][k] + table[1.0][k] for k in keys]) / 2
    return mid, ends


def form_gaps(docs, model: str, task: str, metric: str) -> list[dict[str, Any]]:
    """Per fit form of one (model, task, metric): plain's gap, the form's, their
    difference Δ (paired), the verdict. Empty without depths 0, 0.5 and 1."""
    sub = docs[(docs["model"] == model) & (docs["task"] == task) & (docs["metric"] == metric)]
    binary = bool(sub["binary"].all())
    plain = _gap_vectors(sub, "plain")
    out = []
    for form in FIT_FORMS:
        other = _gap_vectors(sub, form)
        if plain is None or other is None:
            continue
        (mp, ep), (mf, ef) = plain, other
        gaps = {
            "plain_gap": paired_difference(mp, ep, binary),
            "form_gap": paired_difference(mf, ef, binary),
            "difference": paired_difference(mf + ep, mp + ef, binary, span=2),
        }
        out.append({"model": model, "task": task, "metric": metric, "form": form, **gaps,
                    "verdict": form_verdict(*gaps.values())})  # fmt: skip
    return out


def curve_scores(values) -> dict[str, Any]:
    """Every curve, gap and per-form statement of the account's ``values``:
    ``{"curves", "gaps"}`` as :func:`~posgen.results.scores.depth.depth_scores` gives
    them, and ``forms``: :func:`form_gaps` of every (model, task, metric)."""
    docs = account_documents(values)
    scores = depth_scores(docs)
    keys = docs[["model", "task", "metric"]].drop_duplicates().itertuples(index=False)
    scores["forms"] = [row for m, t, x in sorted(keys) for row in form_gaps(docs, m, t, x)]
    return scores


def head_means(masses) -> Any:
    """The heads' mean mass per (model, random_init, task, depth, doc_key, layer)."""
    keys = ["model", "random_init", "task", "depth", "doc_key", "layer"]
    return masses.groupby(keys, as_index=False)[list(MASS_FORMS)].mean()


def _mass_rows(frame, ids: dict[str, Any]) -> list[dict[str, Any]]:
    """Per mass form: each depth's mean with its interval, and the mass gap."""
    rows = []
    for form in MASS_FORMS:
        docs = frame.assign(value=frame[form], form=form)
        table = by_depth(docs, f"{ids} {form}")
        for depth, by_doc in table.items():
            v = np.array([by_doc[k] for k in sorted(by_doc)])
            rows.append({**ids, "form": form, "depth": depth, **mean_interval(v, False)})
        gap = _gap_vectors(docs, form)
        if gap is not None:
            g = paired_difference(*gap, False)
            rows.append({**ids, "form": form, "depth": "gap", **g})
    return rows


def mass_scores(masses) -> list[dict[str, Any]]:
    """Per (model, random_init, task, layer, mass form): rows with ``depth`` a depth (the
    mean over documents of the heads' mean mass, ``value``, ``ci_lo``, ``ci_hi``) or
    ``"gap"`` (the mass gap with its paired interval)."""
    means = head_means(masses)
    rows: list[dict[str, Any]] = []
    for keys, sub in means.groupby(["model", "random_init", "task", "layer"], sort=True):
        ids = dict(zip(("model", "random_init", "task", "layer"), keys, strict=True))
        rows += _mass_rows(sub, {**ids, "random_init": bool(ids["random_init"])})
    return rows


def mass_summary(masses) -> list[dict[str, Any]]:
    """Per (model, random_init, task): the mass averaged over layers and heads, per form,
    as :func:`mass_scores` gives it (``layer`` = ``"mean"``), and per fit form its gap
    minus the measured gap (``depth`` = ``"gap - measured"``, paired)."""
    means = head_means(masses)
    keys = ["model", "random_init", "task", "depth", "doc_key"]
    over = means.groupby(keys, as_index=False)[list(MASS_FORMS)].mean()
    rows: list[dict[str, Any]] = []
    for group, sub in over.groupby(["model", "random_init", "task"], sort=True):
        ids = {"model": group[0], "random_init": bool(group[1]), "task": group[2],
               "layer": "mean"}  # fmt: skip
        rows += _mass_rows(sub, ids)
        measured = _gap_vectors(sub.assign(value=sub["measured"], form="x"), "x")
        for form in FIT_FORMS if measured is not None else ():
            fit = _gap_vectors(sub.assign(value=sub[form], form="x"), "x")
            d = paired_difference(fit[0] + measured[1], measured[0] + fit[1], False)
            rows.append({**ids, "form": form, "depth": "gap - measured", **d})
    return rows


def _fmt(r: dict[str, Any]) -> str:
    return f"{r['value']:+.3g} [{r['ci_lo']:+.3g}, {r['ci_hi']:+.3g}]"


FORM_WORDS = {
    "keeps": "keeps the gap",
    "keeps another size": "keeps a gap of another size",
    "loses": "loses the gap",
    "cannot be told": "keeps or loses it: cannot be told",
}


def account_sentence(forms: list[dict[str, Any]]) -> str:
    """The statement of one (model, task, metric) from its :func:`form_gaps` rows (module
    doc's rule), each figure with its 95 % interval."""
    by = {r["form"]: r for r in forms}
    if "additive" not in by:
        return "The decomposition's account needs depths 0, 0.5 and 1 under every form."
    plain = by["additive"]["plain_gap"]
    if _side(plain) == 0:
        return (
            f"Whether the fitted form explains the curve cannot be told: plain shows no gap "
            f"to account for (gap {_fmt(plain)})."
        )
    head = EXPLAINS.get(by["additive"]["verdict"])
    first = (
        f"The fitted form {head} the curve"
        if head
        else "Whether the fitted form explains the curve cannot be told"
    )
    parts = [
        f"logits={f} {FORM_WORDS[r['verdict']]} (gap {_fmt(r['form_gap'])}, minus plain's "
        f"{_fmt(r['difference'])})"
        for f, r in by.items()
    ]
    return f"{first} (plain's gap {_fmt(plain)}); " + "; ".join(parts) + "."
