"""Text form against position form: where the depth curve comes from.

The text form moves the evidence in the text (position code and reading order change);
the position form moves only its position ids (the tokens, and so what each passage has
read, stay as they are). On the same documents, per depth D, the paired difference
``mean_d [m_d^text(D) - m_d^pos(D)]`` and, from the per-document gaps (see
:mod:`posgen.results.scores.depth`), the gap difference ``gap_text - gap_pos`` with
paired intervals (:func:`~posgen.results.scores.depth.paired_difference`; for a 0/1
metric ``g_text - g_pos = (mid_t + ends_p) - (mid_p + ends_t)``, two sums in [0, 2]).

The statement (:func:`verdict`), from three 95 % intervals: the text form's gap T, the
position form's gap P, their difference Δ = T − P ("excludes 0" = the interval lies on
one side of 0):

1. neither T nor P excludes 0: no gap is shown in either form, so where it comes from
   cannot be told;
2. T and P exclude 0 on the same side and Δ does not: **positions** (the position code
   alone reproduces the text form's gap);
3. T excludes 0, P does not, Δ excludes 0: **reading order** (moving the ids alone does
   not make the gap, and the forms differ);
4. P excludes 0 and Δ excludes 0: **both** (the position code makes a gap, and reading
   order changes it by Δ);
5. anything else (T excludes 0 but P and Δ are both undecided; P excludes 0 but T does
   not and Δ is undecided; T and P on opposite sides with Δ undecided): cannot be told.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from posgen.results.scores.depth import ENDS, MIDDLE, DepthError, by_depth, paired_difference

VERDICTS = ("positions", "reading order", "both", "cannot be told")


def _side(r: dict[str, Any] | None) -> int:
    """+1 / -1 when the interval lies above / below 0, 0 when it holds 0 (or is NaN)."""
    if r is None or not (math.isfinite(r["ci_lo"]) and math.isfinite(r["ci_hi"])):
        return 0
    return 1 if r["ci_lo"] > 0 else -1 if r["ci_hi"] < 0 else 0


def verdict(text_gap: dict | None, pos_gap: dict | None, diff: dict | None) -> str:
    """One of :data:`VERDICTS` from the three intervals, by the rule of the module doc."""
    t, p, d = _side(text_gap), _side(pos_gap), _side(diff)
    if t == 0 and p == 0:
        return "cannot be told"
    if t != 0 and p == t and d == 0:
        return "positions"
    if t != 0 and p == 0 and d != 0:
        return "reading order"
    if p != 0 and d != 0:
        return "both"
    return "cannot be told"


def _fmt(r: dict[str, Any]) -> str:
    return f"{r['value']:+.3g} [{r['ci_lo']:+.3g}, {r['ci_hi']:+.3g}]"


def sentence(which: str, text_gap: dict | None, pos_gap: dict | None, diff: dict | None) -> str:
    """The plain statement of :func:`verdict`'s outcome ``which``, with the figures."""
    figures = (
        f"gap (middle minus ends' mean, 95 % CI): text form {_fmt(text_gap)}, position form "
        f"{_fmt(pos_gap)}, text minus position {_fmt(diff)}"
        if text_gap and pos_gap and diff
        else "the gap needs depths 0, 0.5 and 1 in both forms"
    )
    what = {
        "positions": "The depth curve comes from positions: moving the evidence's position "
        "ids alone gives a gap that cannot be told from the text form's",
        "reading order": "The depth curve comes from reading order: the text form shows a gap, "
        "moving the position ids alone does not, and the two forms differ",
        "both": "The depth curve comes from both: moving the position ids alone gives a gap, "
        "and reading order changes it (the two forms differ)",
        "cannot be told": "Where the depth curve comes from cannot be told from these documents",
    }[which]
    return f"{what} ({figures})."


def _aligned(docs, model: str, task: str, metric: str, filt: str):
    where = f"{model} / {task} / {metric}"
    sub = docs[
        (docs["model"] == model)
        & (docs["task"] == task)
        & (docs["metric"] == metric)
        & (docs["filter"] == filt)
    ]
    tables = {f: by_depth(sub[sub["form"] == f], f"{where} ({f})") for f in ("text", "position")}
    if not tables["text"] or not tables["position"]:
        return None, sub
    keys = [sorted(next(iter(t.values()))) for t in tables.values()]
    if keys[0] != keys[1]:
        raise DepthError(f"{where}: the text and position forms score different documents")
    return tables, sub


def compare_forms(docs, model: str, task: str, metric: str, filt: str = "none") -> dict | None:
    """The two forms of one (model, task, metric) on the same documents: per depth run in
    both, the paired difference text − position (``depths``: ``depth``, ``value``,
    ``ci_lo``, ``ci_hi``, ``n``); both gaps, their difference, the ``verdict`` and its
    ``sentence``. None when either form has no cells."""
    tables, sub = _aligned(docs, model, task, metric, filt)
    if tables is None:
        return None
    text, pos = tables["text"], tables["position"]
    binary = bool(sub["binary"].all())
    keys = sorted(next(iter(text.values())))

    def vec(table: dict, depth: float) -> np.ndarray:
        return np.array([table[depth][k] for k in keys])

    depths = [
        {"depth": d, **paired_difference(vec(text, d), vec(pos, d), binary)}
        for d in sorted(set(text) & set(pos))
    ]
    out: dict[str, Any] = {"model": model, "task": task, "metric": metric, "filter": filt,
                           "binary": binary, "depths": depths}  # fmt: skip
    need = (MIDDLE, *ENDS)
    if all(d in text and d in pos for d in need):
        mid_t, mid_p = vec(text, MIDDLE), vec(pos, MIDDLE)
        ends_t = (vec(text, 0.0) + vec(text, 1.0)) / 2
        ends_p = (vec(pos, 0.0) + vec(pos, 1.0)) / 2
        gaps = {
            "text_gap": paired_difference(mid_t, ends_t, binary),
            "position_gap": paired_difference(mid_p, ends_p, binary),
            "gap_difference": paired_difference(mid_t + ends_p, mid_p + ends_t, binary, span=2),
        }
    else:
        gaps = dict.fromkeys(("text_gap", "position_gap", "gap_difference"))
    which = verdict(*gaps.values())
    return {**out, **gaps, "verdict": which, "sentence": sentence(which, *gaps.values())}
