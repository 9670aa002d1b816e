"""Length scores: t intervals, effective length on planted curves, drift rows."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats

from posgen.results.folder.length_config import LengthConfig
from posgen.results.folder.schema import SCHEMA_VERSION
from posgen.results.report.length import curves_figure, markdown
from posgen.results.scores.length import (
    crossing,
    reference_buckets,
    score_length,
    t_interval,
)

CONFIG = LengthConfig(
    model="m",
    trained_context=64,
    max_length=128,
    bucket_width=16,
    threshold=0.10,
    seed=1,
    schemes=("none",),
    documents=("a", "b", "c"),
)


def _record(scheme: str, doc: str, means: list[float], n: int = 16) -> dict:
    drift = {
        "cos_sum": [[0.0] * 8] * 2,
        "log_norm_sum": [[0.0] * 8] * 2,
        "count": [16.0] * 8,
        "region_cos": [[32 * 0.9, 64 * 0.6], [32 * 0.8, 64 * 0.8]],
        "region_log_norm": [[0.0, 64 * 0.5], [0.0, 0.0]],
        "region_count": [32.0, 64.0],
        "reference": [32, 64],
    }
    return {
        "scheme": scheme,
        "document": doc,
        "nll_sum": [m * n for m in means],
        "count": [n] * len(means),
        "drift": drift,
    }


def test_t_interval_matches_scipy_and_degenerates():
    v = np.array([1.0, 2.0, 4.0])
    mean, lo, hi = t_interval(v)
    want = stats.t.interval(0.95, 2, loc=v.mean(), scale=stats.sem(v))
    assert mean == pytest.approx(7 / 3) and (lo, hi) == pytest.approx(want)
    assert math.isnan(t_interval(np.array([3.0]))[1])


def test_t_interval_coverage_by_simulation():
    rng = np.random.default_rng(0)
    hits = 0
    reps = 2000
    for _ in range(reps):
        _, lo, hi = t_interval(rng.normal(5.0, 2.0, size=4))
        hits += lo <= 5.0 <= hi
    assert abs(hits / reps - 0.95) < 0.015


def test_reference_buckets_and_crossing_on_a_planted_curve():
    idx = reference_buckets(16, 8, 64)
    assert idx.tolist() == [2, 3]
    flat = np.full((2, 8), 2.0)
    sums = flat.copy() * 10
    sums[:, 6:] = 3.0 * 10  # jumps at position 96
    first, ref = crossing(sums, np.full((2, 8), 10.0), idx, math.log1p(0.1), 4)
    assert (first, ref) == (6, 2.0)
    assert crossing(flat, np.ones((2, 8)), idx, 0.1, 4)[0] is None
    sums[:, 2] = 2.5 * 10  # a noisy in-context bucket: not searched (search starts at C)
    assert crossing(sums, np.full((2, 8), 10.0), idx, math.log1p(0.1), 4)[0] == 6
    with pytest.raises(ValueError, match="smaller bucket width"):
        reference_buckets(64, 2, 64)


def test_score_length_effective_lengths_and_drift():
    base = [4.0, 3.0, 2.0, 2.0, 2.0, 2.0, 2.0, 2.0]
    jump = [4.0, 3.0, 2.0, 2.0, 2.05, 2.5, 3.0, 3.5]
    records = [_record("flat", d, [m + 0.01 * i for m in base]) for i, d in enumerate("abc")]
    records += [_record("breaks", d, [m + 0.01 * i for m in jump]) for i, d in enumerate("abc")]
    scores = score_length(records, CONFIG)
    flat, breaks = scores["effective"]["flat"], scores["effective"]["breaks"]
    assert flat["censored"] and flat["effective_length"] == 128
    assert not breaks["censored"] and breaks["effective_length"] == 5 * 16
    assert breaks["ci_low"] <= 80 <= breaks["ci_high"] and breaks["few_documents"]
    assert breaks["reference_nll"] == pytest.approx(2.01)
    rows = [r for r in scores["drift"] if r["scheme"] == "flat"]
    assert [round(r["drift"], 12) for r in rows] == [0.3, 0.0]
    assert rows[0]["log_norm_ratio"] == pytest.approx(0.5)
    again = score_length(records, CONFIG)
    assert again["effective"] == scores["effective"]  # seeded bootstrap
    text = markdown(scores)
    assert "| breaks | 2.010 |" in text and "≥ 128" in text and "not a calibrated" in text
    assert len(curves_figure(scores).axes[0].lines) == 3


def test_compare_lines_pair_runs_by_model_and_scheme(tmp_path):
    import json

    from posgen.results.report.length import compare_lines

    scores = score_length([_record("none", d, [4, 3, 2, 2, 2, 2, 2, 2]) for d in "ab"], CONFIG)
    for run in ("A", "B"):
        (tmp_path / run / "length" / "m").mkdir(parents=True)
        (tmp_path / run / "length" / "m" / "length_scores.json").write_text(json.dumps(scores))
        _write_length_tables(tmp_path / run)
    lines = compare_lines(tmp_path / "A", tmp_path / "B")
    assert lines[-1].split() == [
        "m",
        "none",
        "A",
        "≥128",
        "[128,",
        "128]",
        "B",
        "≥128",
        "[128,",
        "128]",
    ]
    assert compare_lines(tmp_path / "A", tmp_path / "nothing")[-1].endswith("only in A")
    assert compare_lines(tmp_path / "x", tmp_path / "y") == []


def _write_length_tables(run) -> None:
    from posgen.results.tables.length import length_tables

    for name, table in length_tables(run).items():
        table.to_parquet(run / f"{name}.parquet", index=False)


def test_length_tables_hold_effective_lengths_and_curves_and_compare_reads_them(tmp_path):
    """``posgen run --length`` puts each scheme's effective length (with its interval) and
    its bucket curve in the run's tidy tables; compare and the report read the tables."""
    import json

    from posgen.results.folder.schema import SchemaError
    from posgen.results.report.length import compare_lines, run_blocks
    from posgen.results.tables.length import length_tables

    records = [_record("none", d, [4, 3, 2, 2, 2, 2, 2, 2]) for d in "abc"]
    records += [_record("scale:2", d, [4, 3, 2, 2, 3, 3, 3, 3]) for d in "abc"]
    scores = score_length(records, CONFIG)
    folder = tmp_path / "length" / "m"
    folder.mkdir(parents=True)
    (folder / "length_scores.json").write_text(json.dumps(scores))
    with pytest.raises(SchemaError, match="posgen report"):
        compare_lines(tmp_path, tmp_path / "other")  # results without their tables
    tables = length_tables(tmp_path)
    eff = tables["length_effective"].set_index("scheme")
    assert eff.loc["none", "censored"] and eff.loc["none", "effective_length"] == 128
    assert eff.loc["scale:2", "effective_length"] == 64  # bucket 4 crosses: 4 × 16
    assert not eff.loc["scale:2", "censored"]
    assert (eff["trained_context"] == 64).all() and (eff["schema_version"] == SCHEMA_VERSION).all()
    curves = tables["length_curves"]
    assert len(curves) == 2 * 8
    got = curves[curves["scheme"] == "scale:2"].sort_values("bucket")["nll"].tolist()
    assert got == pytest.approx([4, 3, 2, 2, 3, 3, 3, 3])
    _write_length_tables(tmp_path)
    # the readers take the tables, not the JSON: change a table and they follow it
    changed = tables["length_effective"].copy()
    changed.loc[changed["scheme"] == "scale:2", "effective_length"] = 80
    changed.to_parquet(tmp_path / "length_effective.parquet", index=False)
    assert "A 80 [" in compare_lines(tmp_path, tmp_path)[-1]
    table = next(b for b in run_blocks(tmp_path) if b[0] == "table")
    assert [table[2][1][0], table[2][1][3]] == ["scale:2", "80"]
    assert length_tables(tmp_path / "nothing") == {}


def test_document_excess_is_the_mean_past_c_minus_the_effective_lengths_reference():
    from posgen.results.scores.length import document_excess

    # 2 documents, C = 64, buckets of 16: reference buckets 2, 3; past C: 4..7
    means = np.array([[5, 4, 2.0, 3.0, 3, 3, 4, 4], [5, 4, 1.0, 1.0, 2, 2, 2, 2]])
    counts = np.array([[16.0] * 8, [16, 16, 16, 16, 16, 16, 16, 8]])
    excess, weight = document_excess(means * counts, counts, 16, 64)
    assert excess.tolist() == pytest.approx([3.5 - 2.5, 2.0 - 1.0])
    assert weight.tolist() == [64.0, 56.0]
    # C not on the bucket grid (C = 56): past C starts at the first bucket at or after C
    excess, weight = document_excess(means * counts, counts, 16, 56)
    assert weight.tolist() == [64.0, 56.0]  # buckets 4..7 (start 64)
    with pytest.raises(ValueError, match="max length > C"):
        document_excess(means[:, :4] * 16, np.full((2, 4), 16.0), 16, 64)
