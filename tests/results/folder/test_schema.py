"""Tidy rows from lm-eval-shaped output, the schema and document pairing (unit tier)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from posgen.results.folder.schema import (
    PERDOC_COLUMNS,
    RESULT_COLUMNS,
    SCHEMA_VERSION,
    SchemaError,
    frame,
)
from posgen.results.tables import documents, tidy
from synthetic_run import cloze_output, make_run, prose_output

CELL = {
    "task": "posgen_prose",
    "lm_eval_task": "posgen_prose",
    "kind": "none",
    "scheme": "none",
    "rate": 0.0,
    "seed": 1,
    "perturbation_spec": "",
    "perturbation_version": 0,
}
INFO = {"model_path": "/m", "model_revision": "local:x", "dtype": "float32", "random_init": False}


def test_cell_record_recomputes_lm_eval_values_from_the_samples():
    nll, words = np.array([2.0, 3.0, 2.5]), np.array([10, 20, 30])
    results, samples = prose_output("posgen_prose", nll, words)
    rec = tidy.cell_record(CELL, INFO, results, samples, "0.1.0")
    m = rec["metrics"]["word_perplexity,none"]
    assert m["value"] == pytest.approx(math.exp((nll * words).sum() / words.sum()))
    assert m["n"] == 3 and m["stderr"] > 0  # lm-eval said "N/A": posgen's bootstrap
    assert rec["docs"]["word_perplexity,none"]["keys"] == ["src-000", "src-001", "src-002"]
    # bits per byte too: -Σll / Σbytes / ln 2, checked against lm-eval's figure
    assert set(rec["metrics"]) == {
        "word_perplexity,none",
        "byte_perplexity,none",
        "bits_per_byte,none",
    }
    bpb = results["posgen_prose"]["bits_per_byte,none"]
    assert rec["metrics"]["bits_per_byte,none"]["value"] == pytest.approx(bpb)
    assert [d["aggregation"] for d in rec["metric_list"]] == [
        "weighted_perplexity",
        "weighted_perplexity",
        "bits_per_byte",
    ]


def test_cell_record_keeps_lm_eval_stderr_for_accuracy():
    results, samples = cloze_output("posgen_prose", np.array([1.0, 0.0, 1.0, 1.0]))
    rec = tidy.cell_record(CELL, INFO, results, samples, "0.1.0")
    assert rec["metrics"]["acc,none"]["value"] == 0.75
    assert rec["metrics"]["acc,none"]["stderr"] == results["posgen_prose"]["acc_stderr,none"]


def test_samples_that_disagree_with_the_results_are_refused():
    results, samples = prose_output("posgen_prose", np.array([2.0, 3.0]), np.array([5, 6]))
    results["posgen_prose"]["word_perplexity,none"] *= 1.01
    with pytest.raises(SchemaError, match="do not match"):
        tidy.cell_record(CELL, INFO, results, samples, "0.1.0")


def test_missing_samples_are_a_clear_error():
    results, _ = prose_output("posgen_prose", np.array([2.0]), np.array([5]))
    with pytest.raises(SchemaError, match="log_samples"):
        tidy.cell_record(CELL, INFO, results, {}, "0.1.0")


def test_doc_keys_follow_the_perturbed_tasks_rule():
    from posgen.tasks import perturbed_task
    from posgen.tasks.doc_ids import stable_ids

    assert documents.PERTURBED_ID == perturbed_task.DOC_ID
    plain = [{"doc_id": 0, "doc": {"idx": 7}}, {"doc_id": 1, "doc": {"idx": 9}}]
    assert documents.doc_keys(plain, "test") == ["7", "9"]
    assert stable_ids([s["doc"] for s in plain], "test") == ["7", "9"]
    dup = [{"doc_id": 0, "doc": {"id": 1}}, {"doc_id": 1, "doc": {"id": 1}}]
    assert documents.doc_keys(dup, "validation") == ["validation:0", "validation:1"]
    pert = [{"doc_id": 0, "doc": {"posgen_doc_id": "validation:0", "id": 1}}]
    assert documents.doc_keys(pert, "validation") == ["validation:0"]


def test_perdoc_pairs_each_document_with_its_baseline(tmp_path):
    store = make_run(tmp_path, {"m": {"sensitivity": 1.0}})
    cells = store.read_cells()
    per = tidy.perdoc_rows(cells)
    assert set(per["kind"]) == {"text", "position", "feature"}
    assert (per["schema_version"] == SCHEMA_VERSION).all()
    prose = per[(per["metric"] == "word_perplexity") & (per["kind"] == "position")]
    assert len(prose) == 3 * 30
    # planted: the NLL per word rises with the rate
    assert prose.groupby("rate")["delta"].mean().is_monotonic_increasing
    acc = per[per["metric"] == "acc"]
    # planted: a wrong answer picks choice 1, a right one choice 0
    assert set(acc["choice"]) == {0, 1} and (acc["choice"] == (acc["num"] == 0)).all()
    assert (prose["choice"] == -1).all() and (prose["base_choice"] == -1).all()
    res = tidy.result_rows(cells)
    assert list(res.columns) == list(RESULT_COLUMNS)
    assert set(res["kind"]) == {"none", "text", "position", "feature"}


def test_pairing_refuses_different_documents(tmp_path):
    store = make_run(tmp_path, {"m": {"sensitivity": 1.0}})
    cells = store.read_cells()
    victim = next(
        c for c in cells if c["cell"]["kind"] == "position" and "word_perplexity,none" in c["docs"]
    )
    victim["docs"]["word_perplexity,none"]["keys"][0] = "another-doc"
    with pytest.raises(SchemaError, match="documents differ"):
        tidy.perdoc_rows(cells)
    no_base = [c for c in cells if c["cell"]["kind"] != "none"]
    with pytest.raises(SchemaError, match="no baseline"):
        tidy.perdoc_rows(no_base)


def test_frame_refuses_missing_or_unknown_columns():
    row = dict.fromkeys(PERDOC_COLUMNS)
    row.pop("schema_version")
    with pytest.raises(SchemaError, match="unknown columns"):
        frame([{**row, "typo": 1}], PERDOC_COLUMNS)
    row.pop("delta")
    with pytest.raises(SchemaError, match="missing columns"):
        frame([row], PERDOC_COLUMNS)


def test_predicted_choice_is_the_argmax_of_the_choice_loglikelihoods():
    assert (
        documents.predicted_choice({"filtered_resps": [[-3.0, False], [-1.5, True], [-2.0, False]]})
        == 1
    )
    assert documents.predicted_choice({"filtered_resps": [-2.0]}) == -1  # a perplexity sample
    assert documents.predicted_choice({}) == -1
    # one continuation (a cloze acc is is_greedy of the target): no choice to keep
    assert documents.predicted_choice({"filtered_resps": [[-8.3, False]]}) == -1
