"""Realised amounts in the tidy tables and the report (unit tier: planted runs, no model)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

from posgen.results.folder.run_store import RunStore
from posgen.results.folder.schema import SchemaError
from posgen.results.report.build import regenerate
from posgen.results.tables import tidy
from posgen.results.tables.realised import (
    NOTHING_MOVED,
    document_items,
    realised_text,
    summary,
    text_items,
)
from synthetic_run import cloze_output, make_run

CELL = {
    "task": "posgen_cloze",
    "lm_eval_task": "perm_swap_1pct_posgen_cloze",
    "kind": "text",
    "scheme": "swap",
    "rate": 0.01,
    "seed": 1,
    "perturbation_spec": "",
    "perturbation_version": 2,
}
INFO = {"model_path": "/m", "model_revision": "local:x", "dtype": "float32", "random_init": False}


@pytest.fixture(scope="module")
def run(tmp_path_factory):
    root = tmp_path_factory.mktemp("realised") / "run"
    make_run(root, {"embedded": {"sensitivity": 1.0, "fit": 0.6}})
    regenerate(root)
    return root


def test_results_carry_the_cell_realised_means(run):
    store = RunStore.open(run)
    res = tidy.result_rows(store.read_cells())
    text = res[(res["kind"] == "text") & (res["task"] == "posgen_prose")]
    # planted: every other document moves 2·rate, the others nothing
    assert (text["realised_unit"] == "document").all()
    assert (text["realised_items"] == 30).all() and (text["realised_items_moved"] == 15).all()
    assert np.allclose(text["realised_fraction_moved"], text["rate"])
    pos = res[res["kind"] == "position"]
    assert (pos["realised_unit"] == "row").all()
    assert np.allclose(pos["realised_mean_displacement"], 5 * pos["rate"])
    base = res[res["kind"] == "none"]
    assert (base["realised_unit"] == "").all() and (base["realised_items"] == 0).all()


def test_perdoc_carries_each_documents_realised_change(run):
    per = tidy.perdoc_rows(RunStore.open(run).read_cells())
    text = per[(per["kind"] == "text") & (per["metric"] == "word_perplexity")]
    even = text["doc_key"].str[-3:].astype(int) % 2 == 0
    assert np.allclose(text.loc[even, "realised_fraction_moved"], 2 * text.loc[even, "rate"])
    assert (text.loc[~even, "realised_fraction_moved"] == 0).all()
    # position cells: each document's own row (planted: one of 40 tokens per document)
    pos = per[per["kind"] == "position"]
    assert len(pos) and (pos["realised_n"] == 40).all()
    assert np.allclose(pos["realised_fraction_moved"], pos["rate"])
    assert np.allclose(pos["realised_mean_displacement"], 5 * pos["rate"])


def test_report_shows_realised_beside_the_rate_and_the_examples(run):
    md = (run / "report.md").read_text()
    assert "| rate/σ | realised |" in md
    assert "| 0.05 | 0.05 moved, mean \\|Δpos\\| 0.15 (15/30 docs moved) |" in md
    assert "Degradation vs realised mean |Δposition|: embedded" in md
    assert "## Examples: what a rate does on this suite" in md
    assert "tokens:  w0 w1 **w2→7** w3" in md  # the planted position example, marked
    html = (run / "report.html").read_text()
    assert "<mark> w2→7</mark>" in html


def test_a_cell_where_nothing_moved_is_flagged(tmp_path):
    results, samples = cloze_output(CELL["lm_eval_task"], np.array([1.0, 0.0, 1.0]), True)
    for s in samples[CELL["lm_eval_task"]]:
        s["doc"].update(
            posgen_n=29,
            posgen_fraction_moved=0.0,
            posgen_mean_displacement=0.0,
            posgen_dnd=0.0,
            posgen_idc=0.0,
        )
    rec = tidy.cell_record(CELL, INFO, results, samples, "0.1.0")
    row = summary(rec["realised"])
    assert row["realised_items"] == 3 and row["realised_items_moved"] == 0
    assert realised_text(row).startswith(NOTHING_MOVED)
    samples[CELL["lm_eval_task"]][1]["doc"].update(posgen_fraction_moved=2 / 29, posgen_idc=2 / 29)
    row = summary(tidy.cell_record(CELL, INFO, results, samples, "0.1.0")["realised"])
    assert row["realised_items_moved"] == 1 and NOTHING_MOVED not in realised_text(row)
    assert row["realised_fraction_moved"] == pytest.approx(2 / 29 / 3)


def test_qk_noise_rows_have_no_displacement():
    items = [
        {
            "key": "a",
            "n": 5,
            **dict.fromkeys(("fraction_moved", "mean_displacement", "dnd", "idc"), math.nan),
        }
    ]
    row = summary({"unit": "row", "items": items})
    assert math.isnan(row["realised_mean_displacement"])
    assert realised_text(row) == "no position displacement (1 rows)"


def test_a_text_cell_without_posgen_statistics_is_refused():
    _, samples = cloze_output(CELL["lm_eval_task"], np.array([1.0, 0.0]), True)
    with pytest.raises(KeyError, match="posgen_n"):
        text_items(samples[CELL["lm_eval_task"]], ["a", "b"])


def test_a_version_1_run_folder_is_refused_clearly(run, tmp_path):
    old = tmp_path / "old"
    old.mkdir()
    data = json.loads((run / "config.json").read_text())
    (old / "config.json").write_text(json.dumps({**data, "schema_version": 1}))
    with pytest.raises(SchemaError, match=r"schema_version 1.*rerun `posgen run`"):
        RunStore.open(old)


def _row(key: str, n: int, moved: float, docs: list) -> dict:
    stats = {"fraction_moved": moved, "mean_displacement": 2 * moved, "dnd": moved, "idc": moved}
    return {"key": key, "n": n, **stats, "docs": docs}


def test_a_document_with_several_rows_gets_their_token_weighted_mean():
    key_of = {("t", 0): "test:0", ("t", 1): "test:1"}
    rows = [
        _row("a", 30, 0.2, [["t", 0]]),
        _row("b", 10, 0.6, [["t", 0]]),
        _row("c", 5, 0.4, [["t", 0], ["t", 1]]),  # a context both documents share
    ]
    out_rows, docs = document_items(rows, key_of, "t")
    assert [r["docs"] for r in out_rows] == [["test:0"], ["test:0"], ["test:0", "test:1"]]
    d0, d1 = docs
    assert (d0["key"], d0["n"], d0["rows"]) == ("test:0", 45, 3)
    assert d0["fraction_moved"] == pytest.approx((30 * 0.2 + 10 * 0.6 + 5 * 0.4) / 45)
    assert d0["mean_displacement"] == pytest.approx(2 * d0["fraction_moved"])
    assert (d1["n"], d1["rows"], d1["idc"]) == (5, 1, 0.4)
    nan = document_items([{**rows[0], "idc": math.nan}], {("t", 0): "test:0"}, "t")[1]
    assert math.isnan(nan[0]["idc"]) and nan[0]["fraction_moved"] == pytest.approx(0.2)


def test_rows_and_documents_that_do_not_pair_are_refused():
    key_of = {("t", 0): "test:0", ("t", 1): "test:1"}
    with pytest.raises(SchemaError, match=r"documents \['test:1'\].*no model row"):
        document_items([_row("a", 3, 0.1, [["t", 0]])], key_of, "t")
    with pytest.raises(SchemaError, match="document 5 of task 't'"):
        document_items([_row("a", 3, 0.1, [["t", 5]])], key_of, "t")
    with pytest.raises(SchemaError, match="belongs to no document"):
        document_items([_row("a", 3, 0.1, [])], key_of, "t")
    assert document_items([], key_of, "t") == ([], [])  # nothing recorded: nothing paired
