"""The CI regression gate behind ``posgen baseline`` and ``posgen check``.

``posgen baseline RUN -o FILE`` stores one model's per-document degradations on each
task's primary metric and its unperturbed per-document values (see
:mod:`posgen.results.gate.baseline_file`, :mod:`posgen.results.gate.base`) and what
same-seed pairing rests on (:mod:`posgen.results.gate.pairing`). ``posgen check RUN
--baseline FILE`` reads only what the gate needs from the candidate run (its cells'
per-document values: no intervals, tolerance or cross-model scores), pairs it with the
baseline document by document, and for every cell tests whether the candidate is worse
than the baseline by more than the cell's margin (:mod:`posgen.results.gate.margins`:
percent of the perplexity ratio, accuracy points, percent of the unperturbed
perplexity, nats per token of length excess) with
:mod:`posgen.results.stats.paired_test`. The cells: every perturbed (task, metric,
kind, scheme, rate) cell (does the candidate degrade more?), every task's unperturbed
cell (is it worse before any perturbation?) and, with ``posgen run --length``, every
length scheme (did the per-document NLL excess past the trained context grow?
:mod:`posgen.results.gate.length`; ``g`` is that excess, ``w`` tokens past C):

    δ_d    = g_cand,d - g_base,d              (per-document difference, > 0: worse)
    Δ      = Σ w δ / Σ w,  p = one-sided weighted paired t on Δ - margin (H1: Δ > margin)
    FAIL   if the Holm-adjusted p over all cells <= --alpha

so a candidate whose true change is within every margin raises a false alarm with
chance at most --alpha. Each cell's interval is Holm-adjusted to match its verdict:
``Δ ± t_{1-α/k, n-1} se`` with ``k`` the cell's Holm factor
(:func:`posgen.results.stats.paired_test.holm_factors`), so a cell fails exactly when
its interval's lower end is above its margin; the unadjusted ``1 - 2α`` interval is
kept beside it. Stated power: :mod:`posgen.results.gate.power`. ``--statistic worst``
tests each document's worst degradation over the run's perturbation seeds instead of
its mean (unperturbed and length cells: one value).

Exit status: 0 when nothing fails, 1 only for a measured regression, 2 on invalid input
(unreadable, partial, wrongly typed or old baseline, a run that cannot be paired with
it: other suite, limits, prompts, perturbation versions, seed or seeds without
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
from posgen.results.gate.base import base_pairs, base_section, validate_base
from posgen.results.gate.baseline_file import (
    BASELINE_KIND,
    BASELINE_VERSION,
    KEY,
    GateInputError,
    validate,
)
from posgen.results.gate.length import length_pairs, length_section, validate_section
from posgen.results.gate.margins import (
    UNITS,
    Margins,
    level_in_user,
    margin_on_test_scale,
    metric_kind,
    to_user,
)
from posgen.results.gate.pairing import pairing_record, validate_pairing
from posgen.results.gate.perturbed import cell_summaries, gate_cells
from posgen.results.gate.power import documents_needed, noncentrality, spread_known
from posgen.results.scores.run import json_records, load_scores, read_run
from posgen.results.stats.paired_test import holm, holm_factors, weighted_paired_t
from posgen.results.tables.tidy import perdoc_rows, task_metrics

__all__ = ["BASELINE_KIND", "BASELINE_VERSION", "KEY", "GateInputError", "Margins"]
STATISTICS = ("mean", "worst")


def check_options(alpha: float, statistic: str) -> None:
    """Refuse an ``--alpha`` outside (0, 1) or an unknown ``--statistic`` (GateInputError)."""
    if not (isinstance(alpha, (int, float)) and math.isfinite(alpha) and 0 < alpha < 1):
        raise GateInputError(f"--alpha must be in (0, 1), got {alpha}")
    if statistic not in STATISTICS:
        raise GateInputError(f"--statistic: {statistic!r}; give mean or worst")


def gate_payload(run_dir: Path, model: str | None = None) -> dict[str, Any]:
    """What ``posgen check`` reads from a candidate run: the model, its pairing record and
    per-document values (perturbed, unperturbed and length cells), nothing scored."""

    store, cells = read_run(run_dir)
    model = pick_model(store, sorted({c["model"] for c in cells}), model)
    mine = [c for c in cells if c["model"] == model]
    return _payload(store, mine, perdoc_rows(mine), model)


def _payload(store, cells: list[dict[str, Any]], perdoc, model: str) -> dict[str, Any]:

    mine = [c for c in cells if c["model"] == model]
    gated, not_gated = gate_cells(perdoc[perdoc["model"] == model], task_metrics(mine))
    if not gated:
        raise GateInputError(
            f"{store.root}: no cell of {model} can be gated ("
            + "; ".join(f"{n['task']} / {n['metric']}: {n['reason']}" for n in not_gated)
            + "); the gate needs a task whose primary metric is a perplexity or a [0, 1] score"
        )
    return {
        "model": model,
        "pairing": pairing_record(store.run_config, cells, model),
        "cells": gated,
        "not_gated": not_gated,
        "base": base_section(cells, model),
        "length": length_section(store.root, model),
    }


def baseline_payload(run_dir: Path, model: str | None = None) -> dict[str, Any]:
    """The baseline of one model of a run: :func:`gate_payload` plus each cell's scored
    degradation and interval and the model's tolerance (shown, not tested)."""

    store, scores = load_scores(run_dir)
    model = pick_model(store, sorted(set(scores["degradation"]["model"])), model)
    payload = _payload(store, scores["cells"], scores["perdoc"], model)
    cell_summaries(payload["cells"], scores, model)
    tol = scores["tolerance"]
    return {
        "kind": BASELINE_KIND,
        "baseline_version": BASELINE_VERSION,
        "posgen_version": __version__,
        "run": str(run_dir),
        "config_hash": store.config_hash,
        "scoring": store.run_config.scoring.to_dict(),
        **payload,
        "tolerance": json_records(tol[tol["model"] == model].drop(columns=["model"])),
    }


def pick_model(store, models: list[str], model: str | None) -> str:
    """``model`` if the run has it, else the run's only model that is not a twin."""
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
    """A validated baseline file (GateInputError saying what is wrong)."""
    try:
        data = read_json(path, "baseline")
    except SchemaError as e:
        raise GateInputError(str(e)) from None
    except (OSError, UnicodeDecodeError) as e:
        raise GateInputError(f"cannot read the baseline {path}: {e}") from None

    data = validate(data, path)
    validate_pairing(data["pairing"], f"{path}")
    validate_base(data["base"], f"{path}")
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
    """One row per cell: per task its unperturbed cell (a payload without ``base`` has
    none) then its perturbed cells, then one per length scheme (none without
    ``length``): both levels, the paired change with its Holm-adjusted and unadjusted
    intervals, the margin and the smallest change caught with 80 % power (all in the
    cell's unit), p (raw and Holm-adjusted over all cells) and the verdict
    (``stated_power=False``: the change and verdict only, on the test's scale, for
    simulations). Documents or cells that do not pair: GateInputError. Pairing settings
    are checked apart (:func:`posgen.results.gate.pairing.check_pairing`)."""

    margins = margins or Margins()
    check_options(alpha, statistic)
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
    pairs = [(key, base[key], now[key], field) for key in base]
    if baseline.get("base") is not None or current.get("base") is not None:
        pairs += [
            (*p, "g") for p in base_pairs(baseline.get("base") or [], current.get("base") or [])
        ]
    pairs.sort(key=lambda p: (p[0][0], p[0][2] != "none", str(p[0])))
    pairs += [(*p, "g") for p in length_pairs(baseline.get("length"), current.get("length"))]
    rows = [_paired_row(*pair, margins) for pair in pairs]
    p = [r["p"] for r in rows]
    for row, adj, factor in zip(rows, holm(p), holm_factors(p), strict=True):
        row["p_holm"] = float(adj)
        row["holm_factor"] = float(factor)
        row["failed"] = bool(adj <= alpha)
        if stated_power:
            _state_power(row, len(rows), alpha)
    return rows


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
    if b["scale"] != c["scale"]:
        raise GateInputError(
            f"{where}: gated on {b['scale']} in the baseline, {c['scale']} in the run; "
            "make a new baseline"
        )
    kind = metric_kind(b["scale"], base=key[2] == "none")
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
        "spread_known": spread_known(gc - gb),
        **test,
    }


def _by_doc(docs: dict[str, Any], field: str) -> dict[str, tuple[float, float]]:
    values = docs.get(field, docs["g"])  # length and unperturbed cells: one value per document
    return dict(zip(docs["keys"], zip(docs["w"], values, strict=True), strict=True))


def _state_power(row: dict[str, Any], cells: int, alpha: float) -> None:
    """The row's change and intervals in its unit, its MDE80 and power state
    (:data:`posgen.results.gate.power.STATES`)."""
    from scipy import stats

    kind, n, se, margin = row["metric_kind"], row["n"], row["se"], row["margin_test"]
    change = row["change_test"] = row["change"]
    row["change"] = to_user(kind, change)
    for suffix, level in (("", alpha / row["holm_factor"]), ("_unadjusted", alpha)):
        half = float(stats.t.ppf(1 - level, n - 1)) * se
        row[f"ci_lo{suffix}"] = to_user(kind, change - half)
        row[f"ci_hi{suffix}"] = to_user(kind, change + half)
    row["mde"] = row["docs_needed"] = row["noise_ratio"] = None
    if not row["spread_known"]:
        row["power"] = "unknown"
        return
    excess = noncentrality(n, cells, alpha) * se
    row["mde"] = to_user(kind, margin + excess)
    if margin <= 0:  # a margin of 0 tests any increase: "twice the margin" means nothing
        row["power"] = "no margin"
        return
    row["power"] = "powered" if excess <= margin else "underpowered"
    row["noise_ratio"] = excess / margin
    row["docs_needed"] = (
        documents_needed(se * math.sqrt(n), margin, cells, alpha)
        if row["power"] == "underpowered"
        else n
    )


def cell_name(key: tuple) -> str:
    """``task/metric/kind/scheme@rate``; ``task/metric/none`` for an unperturbed cell, no
    ``@rate`` for a length cell."""
    *head, rate = key
    if head[2] == "none":
        return "/".join(map(str, head[:3]))
    return "/".join(map(str, head)) + ("" if rate is None else f"@{rate:g}")
