"""The CI regression gate behind ``posgen baseline`` and ``posgen check``.

``posgen baseline RUN -o FILE`` stores one model's per-document degradations on each
task's primary metric (see :mod:`posgen.results.gate.baseline_file`) and what same-seed
pairing rests on (:mod:`posgen.results.gate.pairing`). ``posgen check RUN --baseline
FILE`` pairs a new run of (a new checkpoint of) the model with it, document by
document, and for every (task, metric, kind, scheme, rate) cell tests whether the
candidate degrades more than the baseline by more than the cell's margin
(:mod:`posgen.results.gate.margins`: percent of the perplexity ratio, accuracy points,
nats per token of length excess) with
:mod:`posgen.results.stats.paired_test`; with ``posgen run --length``, also per length
scheme whether the per-document NLL excess past the trained context grew
(:mod:`posgen.results.gate.length`; ``g`` is that excess, ``w`` tokens past C):

    δ_d    = g_cand,d - g_base,d              (per-document degradation difference)
    Δ      = Σ w δ / Σ w,  p = one-sided weighted paired t on Δ - margin (H1: Δ > margin)
    FAIL   if the Holm-adjusted p over all cells (length cells included) <= --alpha

so a candidate whose true change is within every margin raises a false alarm with
chance at most --alpha. ``--statistic worst`` tests each document's worst degradation
over the run's perturbation seeds instead of its mean (length cells: one value).

Exit status: 0 when nothing fails, 1 only for a measured regression, 2 on invalid input
(unreadable, partial or wrongly typed baseline, a run that cannot be paired with it:
other suite, limits, prompts, perturbation versions, seed or seeds without
--allow-other-seed, documents or cells, other length settings, length in one run only;
no such model, an unwritable --junit-xml) with the reason.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any

import numpy as np

from posgen import __version__
from posgen.results.folder.schema import SchemaError
from posgen.results.folder.store import read_json
from posgen.results.gate.baseline_file import (
    BASELINE_KIND,
    BASELINE_VERSION,
    KEY,
    GateInputError,
    gate_cells,
    validate,
)
from posgen.results.gate.length import length_pairs, length_section, validate_section
from posgen.results.gate.margins import (
    UNITS,
    Margins,
    documents_needed,
    level_in_user,
    margin_on_test_scale,
    metric_kind,
    noise_term,
    to_user,
)
from posgen.results.gate.pairing import pairing_record, validate_pairing
from posgen.results.scores.run import json_records, load_scores
from posgen.results.stats.paired_test import holm, weighted_paired_t

__all__ = ["BASELINE_KIND", "BASELINE_VERSION", "KEY", "GateInputError", "Margins"]


def baseline_payload(run_dir: Path, model: str | None = None) -> dict[str, Any]:
    """The baseline of one model of a run (scores recomputed from the run's cells)."""

    store, scores = load_scores(run_dir)
    model = pick_model(store, scores, model)
    tol = scores["tolerance"]
    tol = tol[tol["model"] == model]
    return {
        "kind": BASELINE_KIND,
        "baseline_version": BASELINE_VERSION,
        "posgen_version": __version__,
        "run": str(run_dir),
        "model": model,
        "config_hash": store.config_hash,
        "pairing": pairing_record(store.run_config, scores["results"], model),
        "scoring": store.run_config.scoring.to_dict(),
        "cells": gate_cells(scores, model),
        "length": length_section(store.root, model),
        "tolerance": json_records(tol.drop(columns=["model"])),
    }


def pick_model(store, scores: dict[str, Any], model: str | None) -> str:
    models = sorted(set(scores["degradation"]["model"]))
    if model is not None:
        if model not in models:
            raise GateInputError(f"model {model!r} is not in {store.root}; it has {models}")
        return model
    twins = {m.label for m in store.run_config.models if m.random_init}
    real = [m for m in models if m not in twins]
    if len(real) != 1:
        raise GateInputError(f"{store.root} holds models {models}: name one with --model")
    return real[0]


def load_baseline(path: Path) -> dict[str, Any]:

    try:
        data = read_json(path, "baseline")
    except SchemaError as e:
        raise GateInputError(str(e)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise GateInputError(f"cannot read the baseline {path}: {e}") from None

    data = validate(data, path)
    validate_pairing(data["pairing"], f"{path}")
    validate_section(data["length"], f"{path}: length")
    return data


def compare(
    baseline: dict[str, Any],
    current: dict[str, Any],
    margins: Margins | None = None,
    alpha: float = 0.05,
    statistic: str = "mean",
    stated_power: bool = True,
) -> list[dict[str, Any]]:
    """One row per baseline cell, then one per length scheme (a payload without a
    ``length`` entry has none): both levels, the paired change with its ``1 - 2 alpha``
    interval, the margin and the smallest change caught with 80 % power (all in the
    cell's unit), p (raw and Holm-adjusted over all cells) and the verdict
    (``stated_power=False``: the change and verdict only, on the test's scale, for
    simulations). Documents or
    cells that do not pair: GateInputError. Pairing settings are checked apart
    (:func:`posgen.results.gate.pairing.check_pairing`)."""

    margins = margins or Margins()
    if not 0 < alpha < 1:
        raise GateInputError(f"--alpha must be in (0, 1), got {alpha}")
    if statistic not in STATISTICS:
        raise GateInputError(f"--statistic: {statistic!r}; give mean or worst")
    now = {tuple(c[k] for k in KEY): c for c in current["cells"]}
    base = {tuple(c[k] for k in KEY): c for c in baseline["cells"]}
    if set(now) != set(base):
        missing = sorted(set(base) - set(now), key=str)[:4]
        extra = sorted(set(now) - set(base), key=str)[:4]
        raise GateInputError(
            "the run and the baseline do not cover the same (task, metric, "
            f"kind, scheme, rate) cells: missing {missing}, extra {extra}; "
            "rerun with the baseline's settings or make a new baseline"
        )
    field = "g_worst" if statistic == "worst" else "g"
    pairs = [(key, base[key], now[key], field) for key in sorted(base, key=str)]
    pairs += [(*p, "g") for p in length_pairs(baseline.get("length"), current.get("length"))]
    rows = [_paired_row(*pair, margins) for pair in pairs]
    for row, adj in zip(rows, holm([r["p"] for r in rows]), strict=True):
        row["p_holm"] = float(adj)
        row["failed"] = bool(adj <= alpha)
        if stated_power:
            _state_power(row, len(rows), alpha)
    return rows


STATISTICS = ("mean", "worst")


def _paired_row(
    key: tuple, b: dict[str, Any], c: dict[str, Any], field: str, margins: Margins
) -> dict[str, Any]:

    where = cell_name(key)
    bd = _by_doc(b["docs"], field)
    cd = _by_doc(c["docs"], field)
    if set(bd) != set(cd):
        diff = sorted(set(bd) ^ set(cd))[:4]
        raise GateInputError(
            f"{where}: the run scored other documents than the baseline (e.g. {diff}); "
            "the gate pairs documents: rerun on the baseline's documents"
        )
    keys = sorted(bd)
    w = np.array([bd[k][0] for k in keys])
    if not all(math.isclose(bd[k][0], cd[k][0], rel_tol=1e-9) for k in keys):
        raise GateInputError(f"{where}: document lengths differ from the baseline's")
    gb, gc = np.array([bd[k][1] for k in keys]), np.array([cd[k][1] for k in keys])
    level_b, level_c = float((w * gb).sum() / w.sum()), float((w * gc).sum() / w.sum())
    rule = "perplexity" if c.get("unit", "relative") in ("relative", "length") else "mean"
    kind = metric_kind(key[1], rule)
    margin = margin_on_test_scale(kind, margins.of(kind))
    test = weighted_paired_t(gc - gb, w, margin)
    return {
        **dict(zip(KEY, key, strict=True)),
        "unit": UNITS[kind],
        "metric_kind": kind,
        "level_base": level_b,
        "baseline": level_in_user(kind, level_b),
        "current": level_in_user(kind, level_c),
        "margin": margins.of(kind),
        "margin_test": margin,
        **test,
    }


def _by_doc(docs: dict[str, Any], field: str) -> dict[str, tuple[float, float]]:
    values = docs.get(field, docs["g"])  # length cells: one value per document
    return dict(zip(docs["keys"], zip(docs["w"], values, strict=True), strict=True))


def _state_power(row: dict[str, Any], cells: int, alpha: float) -> None:
    """The row's change, interval and MDE in its unit, and whether it is powered."""
    from scipy import stats

    kind, n, se = row["metric_kind"], row["n"], row["se"]
    half = float(stats.t.ppf(1 - alpha, n - 1)) * se
    noise = noise_term(n, cells, alpha) * se
    row["change_test"] = row["change"]
    row["change"] = to_user(kind, row["change_test"])
    row["ci_lo"] = to_user(kind, row["change_test"] - half)
    row["ci_hi"] = to_user(kind, row["change_test"] + half)
    row["mde"] = to_user(kind, row["margin_test"] + noise)
    # None: a margin of 0 tests any increase, and "twice the margin" means nothing
    row["powered"] = bool(noise <= row["margin_test"]) if row["margin_test"] > 0 else None
    row["docs_needed"] = (
        documents_needed(se * math.sqrt(n), row["margin_test"], cells, alpha)
        if row["powered"] is False
        else n
    )
    row["noise_ratio"] = noise / row["margin_test"] if row["margin_test"] > 0 else math.inf


def cell_name(key: tuple) -> str:
    """``task/metric/kind/scheme@rate`` (no ``@rate`` for a length cell)."""
    *head, rate = key
    return "/".join(map(str, head)) + ("" if rate is None else f"@{rate:g}")
