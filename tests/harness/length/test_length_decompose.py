"""posgen length --decompose on a tiny model with a 64-token trained context: the per-head
fit lands in the length folder, equal to decompose_model on the same ids under the same
scheme; resume, the --decompose upgrade and refusal; bad input before any model loads."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest

from posgen.harness.cli import main as cli_main
from posgen.harness.decomposition import pipeline
from posgen.perturbations.length import LengthLambda, LengthNone, LengthScale, LengthYarn
from posgen.results.scores.length_decompose import COLUMNS, decomposition_path

pytestmark = pytest.mark.heavy

C = 64
SCHEMES = "none;scale:2;yarn:2;lambda:2,32"


def _run(tiny_path, out, *extra):
    argv = ["length", "--model", str(tiny_path), "--schemes", SCHEMES, "--documents", "1"]
    argv += ["--max-length", str(2 * C), "--bucket-width", "16", "--out", str(out), *extra]
    return cli_main(argv)


def _document_ids(tiny_path) -> list[int]:
    """The ids the length run scored: the first built-in document cut to 2 C tokens."""
    from transformers import AutoTokenizer

    from posgen.harness.length.documents import builtin_documents, select

    tok = AutoTokenizer.from_pretrained(tiny_path)
    sel = select(builtin_documents(), lambda t: tok(t).input_ids, 2 * C, 1)
    (ids,) = sel.token_ids.values()
    return ids


@pytest.fixture(scope="module")
def run_folder(tiny_path, tmp_path_factory):
    out = tmp_path_factory.mktemp("length-decompose") / "run"
    assert _run(tiny_path, out, "--decompose") == 0
    return out


@pytest.mark.parametrize("scheme", [LengthScale(2.0), LengthYarn(2.0), LengthLambda(2, 32)])
def test_folder_rows_equal_decompose_model_on_the_same_ids(
    tiny_path, run_folder, scheme, monkeypatch
):
    from posgen.harness.length.decompose import scheme_forward
    from posgen.harness.loading import model_entries

    config = json.loads((run_folder / "config.json").read_text())["config"]
    assert config["decompose"] is True
    (doc,) = config["documents"]
    record = json.loads(decomposition_path(run_folder, scheme.to_string(), doc).read_text())
    ids = _document_ids(tiny_path)
    assert record["n_tokens"] == len(ids) == 2 * C
    monkeypatch.setattr(pipeline, "probe_token_windows", lambda tok, docs, tokens: [ids])
    (entry,) = model_entries([str(tiny_path)])
    table = pipeline.decompose_model(
        entry,
        docs=1,
        tokens=len(ids),
        progress=False,
        length=scheme,
        context=C,
        forward_context=scheme_forward(scheme, None, 1234, None),
    )
    heads = record["heads"]
    assert len(heads) == len(table) == 2 * 4  # layers × heads of the tiny model
    for column in ("layer", "head", "n", "r_3axis", "r_2axis", *COLUMNS):
        np.testing.assert_allclose(
            [np.nan if h[column] is None else h[column] for h in heads],  # NaN is null in JSON
            table[column].to_numpy(float),
            rtol=1e-12,
            atol=1e-12,
        )
    assert np.isfinite(table["r_3axis_past_context"]).all()
    if scheme.uses_attention:  # Λ: its local band is fitted, the global keys left out
        assert set(table["fit_mask"]) == {"lambda-band:32"}


def test_the_position_scheme_and_seed_reach_the_fit(tiny_path, run_folder, tmp_path, monkeypatch):
    from posgen.harness.length.decompose import scheme_forward
    from posgen.perturbations import parse

    out = tmp_path / "swap"
    argv = ["--positions", "swap:0.2", "--seed", "7", "--decompose"]
    assert _run(tiny_path, out, *argv) == 0
    (doc,) = json.loads((out / "config.json").read_text())["config"]["documents"]
    heads = json.loads(decomposition_path(out, "none", doc).read_text())["heads"]
    plain = json.loads(decomposition_path(run_folder, "none", doc).read_text())["heads"]
    assert not np.allclose([h["r_3axis"] for h in heads], [h["r_3axis"] for h in plain])
    ids = _document_ids(tiny_path)
    monkeypatch.setattr(pipeline, "probe_token_windows", lambda tok, docs, tokens: [ids])
    forward = scheme_forward(LengthNone(), parse("position", "swap:0.2"), 7, None)
    table = pipeline.decompose_model(
        str(tiny_path), docs=1, tokens=len(ids), progress=False, context=C, forward_context=forward
    )
    np.testing.assert_allclose(
        [h["r_3axis"] for h in heads], table["r_3axis"].to_numpy(float), rtol=1e-12, atol=1e-12
    )


def test_scale_changes_the_fit_past_c(run_folder):
    (doc,) = json.loads((run_folder / "config.json").read_text())["config"]["documents"]

    def past(scheme):
        record = json.loads(decomposition_path(run_folder, scheme, doc).read_text())
        return np.array([h["r_3axis_past_context"] for h in record["heads"]])

    assert not np.allclose(past("none"), past("scale:2.0"))


def test_report_has_the_table_beside_drift_and_the_figure(run_folder):
    text = (run_folder / "length.md").read_text()
    assert "### Drift and the decomposition past C" in text
    assert "| layer | drift | r before C | r past C | r drop | a trend rms past |" in text
    assert "`scale:2.0`: ρ(drift, r drop)" in text
    assert (run_folder / "length_decomposition.png").read_bytes()[:4] == b"\x89PNG"
    scores = json.loads((run_folder / "length_scores.json").read_text())
    rows = scores["decomposition"]["layers"]
    assert {(r["scheme"], r["layer"]) for r in rows} == {
        (s, layer) for s in ("none", "scale:2.0", "yarn:2.0", "lambda:2,32") for layer in (0, 1)
    }
    drift = {(r["scheme"], r["layer"]): r["drift"] for r in scores["drift"]}
    for row in rows:
        assert row["drift"] == drift[(row["scheme"], row["layer"])]
        assert row["n_heads"] == 4 and row["n_documents"] == 1


def test_rerun_resumes_and_decompose_is_added_not_dropped(tiny_path, tmp_path, capsys):
    out = tmp_path / "run"
    assert _run(tiny_path, out) == 0  # no --decompose
    records = sorted((out / "docs").rglob("*.json"))
    stamps = [f.stat().st_mtime_ns for f in records]
    assert not (out / "decompose").exists()
    assert _run(tiny_path, out, "--decompose") == 0  # resumes: only the fits run
    assert [f.stat().st_mtime_ns for f in records] == stamps
    fits = sorted((out / "decompose").rglob("*.json"))
    assert len(fits) == 4  # one per scheme
    assert json.loads((out / "config.json").read_text())["config"]["decompose"] is True
    fit_stamps = [f.stat().st_mtime_ns for f in fits]
    assert _run(tiny_path, out, "--decompose") == 0  # nothing recomputed
    assert [f.stat().st_mtime_ns for f in fits] == fit_stamps
    assert [f.stat().st_mtime_ns for f in records] == stamps
    capsys.readouterr()
    assert _run(tiny_path, out) == 2  # dropping --decompose is refused
    err = capsys.readouterr().err
    assert "with --decompose; rerun with --decompose" in err


@pytest.mark.parametrize(
    ("args", "match"),
    [(["--max-length", str(C)], r"does not pass the trained context C = 64")],
)
def test_bad_decompose_input_is_refused_before_the_model_loads(
    tiny_path, tmp_path, args, match, capsys, monkeypatch
):
    from posgen.harness import loading

    def no_load(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(loading, "load_model", no_load)
    out = tmp_path / "x"
    argv = ["length", "--model", str(tiny_path), "--documents", "1", "--out", str(out)]
    assert cli_main([*argv, "--decompose", *args]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and re.search(match, err), err
    assert not out.exists()


def test_lambda_without_its_attention_block_is_refused():
    """Under Λ the capture learns the scheme from the enclosing lambda_attention block;
    a forward context that does not enter it would fit plain causal attention."""
    with pytest.raises(ValueError, match="needs forward_context to enter lambda_attention"):
        pipeline.decompose_windows(None, [[1, 2, 3]], length=LengthLambda(4, 64), progress=False)
