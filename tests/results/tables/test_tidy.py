"""A document with no words or bytes never crashes scoring (unit tier)."""

from __future__ import annotations

import math

import numpy as np
import pytest

from posgen.results.report.run_notes import excluded_blocks
from posgen.results.tables import tidy
from synthetic_run import plant_text_realised, prose_output

INFO = {"model_path": "/m", "model_revision": "local:x", "dtype": "float32", "random_init": False}


def _cell(kind: str, rate: float) -> dict:
    return {
        "task": "posgen_prose",
        "lm_eval_task": "posgen_prose",
        "kind": kind,
        "scheme": "none" if kind == "none" else "swap",
        "rate": rate,
        "seed": 1,
        "perturbation_spec": "",
        "perturbation_version": 0,
    }


def _record(kind: str, rate: float, nll: np.ndarray, words: np.ndarray) -> dict:
    results, samples = prose_output("posgen_prose", nll, words, perturbed=kind != "none")
    if kind == "text":
        plant_text_realised(samples["posgen_prose"], rate)
    rec = tidy.cell_record(_cell(kind, rate), INFO, results, samples, "0.1.0")
    return {**rec, "model": "m"}


def test_an_empty_document_is_excluded_from_the_ratio_and_counted() -> None:
    nll, words = np.array([2.0, 3.0, 2.5]), np.array([10, 0, 30])  # doc 1: lm-eval's [0, 0]
    base = _record("none", 0.0, nll, words)
    m = base["metrics"]["word_perplexity,none"]
    assert m["n"] == 2 and m["excluded"] == 1
    assert m["value"] == pytest.approx(math.exp((nll * words).sum() / words.sum()))
    assert base["docs"]["word_perplexity,none"]["excluded"] == ["src-001"]
    assert base["docs"]["byte_perplexity,none"]["excluded"] == ["src-001"]
    pert = _record("text", 0.5, nll + 0.5, words)
    pairs = tidy.perdoc_rows([base, pert])
    assert set(pairs["doc_key"]) == {"src-000", "src-002"} and np.isfinite(pairs["delta"]).all()
    (note,) = excluded_blocks([base, pert])
    assert "m / posgen_prose / word_perplexity: 1" in note[1]


def test_no_note_when_every_document_has_words() -> None:
    assert excluded_blocks([_record("none", 0.0, np.array([2.0]), np.array([5]))]) == []
