"""A corrupt or unfinished run folder is bad input (exit 2, one line naming the file) in
every command that reads it, never a regression or a traceback (unit tier: no model)."""

from __future__ import annotations

import json

import pytest

from synthetic_run import cli, make_run

pytestmark = pytest.mark.heavy

MODEL = {"embedded": {"sensitivity": 1.0, "fit": 0.6}}


@pytest.fixture(scope="module")
def good(tmp_path_factory):
    root = tmp_path_factory.mktemp("corrupt")
    make_run(root / "good", MODEL, seed=1)
    assert cli(["baseline", str(root / "good"), "-o", str(root / "baseline.json")]) == 0
    return root


def _commands(run, good):
    return {
        "check": ["check", str(run), "--baseline", str(good / "baseline.json")],
        "baseline": ["baseline", str(run), "-o", str(run.parent / f"{run.name}.json")],
        "report": ["report", str(run)],
        "compare": ["compare", str(good / "good"), str(run)],
    }


def _all_exit_2_naming(run, good, capsys, needle: str, skip: tuple[str, ...] = ()) -> None:
    for name, argv in _commands(run, good).items():
        if name in skip:
            continue
        assert cli(argv) == 2, name
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and needle in err, (name, err)


def test_a_truncated_decomposition_parquet(good, tmp_path, capsys):
    run = tmp_path / "run"
    make_run(run, MODEL, seed=1)
    path = next((run / "decomposition").glob("*.parquet"))
    path.write_bytes(path.read_bytes()[:100])
    _all_exit_2_naming(run, good, capsys, f"{path} is unreadable", skip=("check",))
    # the gate reads the cells' per-document values only, never the decomposition
    assert cli(_commands(run, good)["check"]) == 0


@pytest.mark.parametrize(
    "edit,why",
    [
        (lambda d: d["docs"]["word_perplexity,none"]["num"].__setitem__(3, None), "num[3] is None"),
        (lambda d: d["docs"]["word_perplexity,none"]["den"].__setitem__(0, 0), "den[0] is 0"),
        (lambda d: d["docs"]["word_perplexity,none"]["num"].pop(), "of one length"),
        (lambda d: d.pop("docs"), "'docs' is missing"),
    ],
)
def test_a_null_or_malformed_per_document_value(good, tmp_path, capsys, edit, why):
    run = tmp_path / "run"
    make_run(run, MODEL, seed=1)
    path = next((run / "cells").glob("*/posgen_prose__position_swap_0.2.json"))
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))
    _all_exit_2_naming(run, good, capsys, f"{path} is corrupt: ")
    cli(["check", *_commands(run, good)["check"][1:]])
    assert why in capsys.readouterr().err


def test_a_run_missing_a_finished_cell_names_it(good, tmp_path, capsys):
    run = tmp_path / "run"
    make_run(run, MODEL, seed=1)
    next((run / "cells").glob("*/posgen_cloze__text_swap_0.2.json")).unlink()
    _all_exit_2_naming(run, good, capsys, "missing 1 finished cell(s)")
    assert cli(["report", str(run)]) == 2
    assert "embedded: posgen_cloze text/swap@0.2 seed 1" in capsys.readouterr().err
    assert not (run / "report.md").exists()


def test_an_unreadable_length_scores_file_is_named(good, tmp_path, capsys):
    run = tmp_path / "run"
    make_run(run, MODEL, seed=1)
    path = run / "length" / "embedded" / "length_scores.json"
    path.parent.mkdir(parents=True)
    path.write_text("{trunc")
    assert cli(["report", str(run)]) == 2
    assert f"({path})" in capsys.readouterr().err


def test_an_empty_document_logged_as_one_word_is_left_out_of_word_perplexity():
    from posgen.results.folder.metrics import MetricSpec
    from posgen.results.tables.documents import cell_metrics, extract_docs

    def sample(i, text, ll):
        words, nbytes = max(1, len(text.split())), len(text.encode())
        return {
            "doc_id": i,
            "doc": {"doc_id": f"d{i}", "text": text},
            "filter": "none",
            "word_perplexity": [ll, words],  # lm-eval: len(re.split(r"\s+", "")) == 1
            "byte_perplexity": [ll, nbytes],
        }

    samples = [sample(0, "one two three", -6.0), sample(1, "", 0.0), sample(2, "four five", -5.0)]
    specs = [
        MetricSpec(m, "none", "weighted_perplexity", False)
        for m in ("word_perplexity", "byte_perplexity")
    ]
    docs, _ = extract_docs(samples, specs)
    assert docs["word_perplexity,none"]["keys"] == ["d0", "d2"]
    assert docs["word_perplexity,none"]["excluded"] == ["d1"]
    assert docs["byte_perplexity,none"]["excluded"] == ["d1"]
    # lm-eval's own value counted the empty document as a word of loglikelihood 0
    reported = {"word_perplexity,none": float(__import__("math").exp(11.0 / 6))}
    metrics = cell_metrics(docs, specs, reported)
    word = metrics["word_perplexity,none"]
    assert word["value"] == pytest.approx(__import__("math").exp(11.0 / 5))
    assert word["n"] == 2 and word["excluded"] == 1
