"""``posgen run`` and every metric of its tasks; an earlier schema's run folder read back
through lm-eval's output it keeps (integration tier, tiny models)."""

from __future__ import annotations

import json

import pandas as pd
import pytest

from synthetic_run import cli

pytestmark = pytest.mark.heavy

TEXT_AND_POSITION = ["--kinds", "text,position", "--rates", "0,0.5", "--no-progress"]


@pytest.fixture(scope="module")
def prose_run(tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("metrics_run") / "run"
    model = str(tiny_model_dir("llama", 0))
    argv = ["run", "--model", model, "--suite", "posgen_prose", "--limit", "2"]
    assert cli([*argv, *TEXT_AND_POSITION, "--out", str(out)]) == 0
    return out


def test_a_perplexity_run_scores_bits_per_byte_too(prose_run):
    res = pd.read_parquet(prose_run / "results.parquet")
    assert set(res["metric"]) == {"word_perplexity", "byte_perplexity", "bits_per_byte"}
    assert set(res["filter"]) == {"none"} and not res["higher_is_better"].any()
    degr = pd.read_parquet(prose_run / "degradation.parquet").set_index(["metric", "kind"])
    assert degr.loc[("bits_per_byte", "text"), "unit"] == "bits"
    assert degr.loc[("word_perplexity", "text"), "unit"] == "relative"


def test_an_earlier_schemas_folder_is_refused_and_its_lm_eval_output_reads_back(
    prose_run, tmp_path, capsys
):
    import shutil

    old = tmp_path / "old"
    shutil.copytree(prose_run, old)
    config = json.loads((old / "config.json").read_text())
    (old / "config.json").write_text(json.dumps({**config, "schema_version": 2}))
    assert cli(["report", str(old)]) == 2
    err = capsys.readouterr().err
    assert "schema_version 2" in err and "posgen ingest RUN/raw --out NEW" in err
    # the raw folder holds lm-eval's own output of every cell, position cells included
    assert cli(["ingest", str(old / "raw"), "--out", str(tmp_path / "new")]) == 0
    cols = ["kind", "metric", "value"]
    ran = pd.read_parquet(prose_run / "results.parquet")[cols].sort_values(cols[:2])
    back = pd.read_parquet(tmp_path / "new" / "results.parquet")[cols].sort_values(cols[:2])
    pd.testing.assert_frame_equal(ran.reset_index(drop=True), back.reset_index(drop=True))
