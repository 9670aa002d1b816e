"""posgen length on a tiny model with a 64-token trained context: NLL runner, drift
capture, the command and its resumable folder."""

from __future__ import annotations

import json
import re

import numpy as np
import pytest
import torch
from tests.tiny_models import build_short_context_model

from door_forwards import document
from posgen.harness.cli import main as cli_main
from posgen.harness.length.drift import drift_capture, token_cosines
from posgen.harness.length.nll import bucket_sums, position_nll
from posgen.perturbations.length import LengthLambda, LengthNone, LengthScale, LengthYarn

C = 64


@pytest.fixture(scope="module")
def model():
    return build_short_context_model("llama", max_positions=C)


def load_model(path, scheme):
    """The tiny model loaded as ``posgen length`` loads it, with ``scheme``'s rope settings."""
    from posgen.harness.loading import load_model as load
    from posgen.harness.loading import model_entries

    (entry,) = model_entries([str(path)])
    return load(entry, "cpu", length=scheme).model


def _ids(n: int) -> torch.Tensor:
    return torch.randint(3, 384, (1, n), generator=torch.Generator().manual_seed(5))


def test_position_nll_matches_the_model_logits_in_any_chunking(model):
    ids = _ids(150)
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].double(), dim=-1)
    expected = -logp[:-1].gather(1, ids[0, 1:, None])[:, 0].numpy()
    for chunk in (7, 1024):
        got = position_nll(model, ids, chunk=chunk)
        assert np.isnan(got[0])
        np.testing.assert_allclose(got[1:], expected, rtol=1e-5, atol=1e-5)


def test_bucket_sums_skip_nan_and_overflow():
    sums, counts = bucket_sums(np.array([np.nan, 1.0, 2.0, 3.0, 4.0, 5.0]), 2, 2)
    assert sums.tolist() == [1.0, 5.0] and counts.tolist() == [1, 2]


def test_schemes_change_only_what_they_should(model):
    ids = _ids(2 * C)
    plain = position_nll(model, ids)
    with document(model, ids, LengthNone()):
        assert np.array_equal(position_nll(model, ids), plain, equal_nan=True)
    with document(model, ids, LengthLambda(4, C)):
        lam = position_nll(model, ids)
    # window = C: the first C+1 predictions see no capped key (float noise only)
    np.testing.assert_allclose(lam[1 : C + 1], plain[1 : C + 1], rtol=1e-5, atol=1e-5)
    assert not np.allclose(lam[C + 1 :], plain[C + 1 :])
    with document(model, ids, LengthScale(2.0)):
        assert not np.allclose(position_nll(model, ids)[1:], plain[1:])
    with (
        pytest.raises(RuntimeError, match="load time"),
        document(model, ids, LengthYarn(2.0)),
    ):
        pass


def test_token_cosines_planted_directions():
    out = torch.zeros(8, 4)
    out[:4, 0] = 2.0  # in-context tokens along e0
    out[4:, 1] = 3.0  # later tokens along e1
    cos, log_norm = token_cosines(out, (2, 4))
    np.testing.assert_allclose(cos, [1, 1, 1, 1, 0, 0, 0, 0], atol=1e-12)
    np.testing.assert_allclose(log_norm, np.log([2] * 4 + [3] * 4))


def test_drift_capture_sums_per_layer(model):
    ids = _ids(2 * C)
    with torch.no_grad(), drift_capture(model, C, 16, 8) as found:
        model(ids)
    (sums,) = found
    assert sums.cos_sum.shape == (2, 8) and sums.count.tolist() == [16] * 8
    assert sums.region_count.tolist() == [C // 2, C]
    drift, ratio = sums.layer_drift()
    assert drift.shape == (2,) and np.isfinite(drift).all() and np.isfinite(ratio).all()
    # bucket sums agree with the region sums
    np.testing.assert_allclose(sums.cos_sum[:, 2:4].sum(1), sums.region_cos[:, 0])


def test_rope_scalings_load_through_the_config(tiny_path):
    yarn = load_model(str(tiny_path), LengthYarn(2.0))
    assert yarn.model.rotary_emb.rope_type == "yarn"
    assert yarn.config.max_position_embeddings == 2 * C


def _run(tiny_path, out, *extra):
    return cli_main(
        [
            "length",
            "--model",
            str(tiny_path),
            "--schemes",
            "none;lambda:2,32;scale:2;yarn:2;dynamic:2",
            "--documents",
            "2",
            "--bucket-width",
            "16",
            "--out",
            str(out),
            *extra,
        ]
    )


def test_command_writes_a_resumable_folder(tiny_path, tmp_path, capsys):
    out = tmp_path / "run"
    assert _run(tiny_path, out) == 0
    printed = capsys.readouterr().out
    assert "| yarn:2.0 |" in printed and "Attention-output drift" in printed
    scores = json.loads((out / "length_scores.json").read_text())
    assert set(scores["effective"]) == {
        "none",
        "lambda:2,32",
        "scale:2.0",
        "yarn:2.0",
        "dynamic:2.0",
    }
    assert len(scores["curves"]) == 5 * 8 and len(scores["drift"]) == 5 * 2
    assert (out / "length_curves.png").read_bytes()[:4] == b"\x89PNG"
    files = sorted((out / "docs").rglob("*.json"))
    assert len(files) == 10
    stamps = [f.stat().st_mtime_ns for f in files]
    assert _run(tiny_path, out) == 0  # resumes: nothing recomputed
    assert [f.stat().st_mtime_ns for f in files] == stamps
    capsys.readouterr()
    assert _run(tiny_path, out, "--threshold", "0.2") == 2
    assert "another config" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("args", "match"),
    [
        (["--schemes", "lambda:4"], "GLOBAL,WINDOW"),
        (["--positions", "swapp:0.1"], "unknown position"),
        (["--documents", "9"], r"\[1, 5\]"),
        (["--bucket-width", "64"], "no position bucket"),
    ],
)
def test_bad_input_is_refused_with_a_message(tiny_path, tmp_path, args, match, capsys):
    out = tmp_path / "x"
    assert cli_main(["length", "--model", str(tiny_path), "--out", str(out), *args]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and re.search(match, err), err
    assert not out.exists()


def test_jobs_for_run_write_length_folders_and_report_blocks(tiny_path, tmp_path):
    from posgen.harness.length.job import jobs_for_run, run_job
    from posgen.harness.loading import model_entries
    from posgen.results.report.length import run_blocks
    from posgen.results.tables.tidy import length_tables

    models = model_entries([str(tiny_path)], random_init=True)
    # 'quick' = 2 documents to 1.5 C, none;lambda:4,C;infllm;scale:2 with C from the model
    # config (64); the random-init twin gets none
    (job,) = jobs_for_run(tmp_path, models, "quick", "cpu")
    schemes = job.config.schemes
    assert (schemes[:2], schemes[3]) == (("none", "lambda:4,64"), "scale:2.0")
    assert schemes[2].startswith("infllm:") and job.wanted == 2
    assert job.config.max_length == 3 * C // 2
    lines = []
    outcome = run_job(job, progress=lines.append, note=lines.append)
    # one line per (scheme, document), per window pass and per shared prefix
    assert len(lines) == 4 * 2 + 2 + 2
    assert sum(line.split()[0] == "prefix" for line in lines) == 2
    (folder,) = (tmp_path / "length").iterdir()
    assert outcome.folder == folder and (folder / "length.md").read_text() == outcome.markdown
    scores = json.loads((folder / "length_scores.json").read_text())
    assert sorted(scores["effective"]) == sorted(schemes)
    for name, table in length_tables(tmp_path).items():  # what regenerate writes
        table.to_parquet(tmp_path / f"{name}.parquet", index=False)
    kinds = [b[0] for b in run_blocks(tmp_path)]
    assert kinds == ["h", "p", "table", "p", "img", "p", "table", "p", "table"]
    assert "length_excess" in length_tables(tmp_path)
    # the gate reads the same folder: per document, excess = mean NLL past C - reference,
    # with the effective length's reference
    from posgen.results.gate.length import length_section
    from posgen.results.scores.length import read_records

    section = length_section(tmp_path, models[0].label)
    assert (
        section["settings"]["trained_context"] == C
        and section["settings"]["max_length"] == 3 * C // 2
    )
    for cell in section["cells"]:
        (rec_a, rec_b) = read_records(folder, [cell["scheme"]], section["settings"]["documents"])
        k = C // section["settings"]["bucket_width"]  # the first bucket past C
        past = [sum(r["nll_sum"][k:]) / sum(r["count"][k:]) for r in (rec_a, rec_b)]
        reference = np.mean(np.subtract(past, cell["docs"]["g"]))
        assert reference == pytest.approx(scores["effective"][cell["scheme"]]["reference_nll"])
        assert cell["docs"]["w"] == [sum(r["count"][k:]) for r in (rec_a, rec_b)]
    # and the window cells: per document, Σ (scheme − window) past C / tokens past C
    from posgen.results.scores.length_window import read_windows

    windows = read_windows(folder, section["settings"]["documents"])
    assert section["settings"]["window_stride"] == C // 2
    for cell in section["window_cells"]:
        recs = read_records(folder, [cell["scheme"]], section["settings"]["documents"])
        want = [
            (sum(r["nll_sum"][k:]) - sum(w["nll_sum"][k:])) / sum(r["count"][k:])
            for r, w in zip(recs, windows, strict=True)
        ]
        assert cell["docs"]["g"] == pytest.approx(want)


@pytest.mark.parametrize("args", [["--factor", "2"], ["--max-length", "100"]])
def test_quick_refuses_another_length(args, capsys):
    assert cli_main(["length", "--quick", *args]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and "--quick fixes F = 1.5" in err, err


def test_posgen_run_refuses_a_bad_length_before_loading(capsys):
    assert cli_main(["run", "--length", "lambda:4", "--quick"]) == 2
    assert "--length" in capsys.readouterr().err


def test_scale_equals_interpolated_positions_and_composes(model):
    from posgen.harness.model_side.positions.rotary import rotary_positions
    from posgen.perturbations import parse

    ids = _ids(100)
    with torch.no_grad(), rotary_positions(model, torch.arange(100.0).unsqueeze(0) / 2):
        expected = model(ids).logits
    with torch.no_grad(), document(model, ids, LengthScale(2.0)):
        assert torch.equal(model(ids).logits, expected)
    swap = parse("position", "swap:0.2")
    values = torch.tensor(swap.position_values(ids[0].numpy(), 7), dtype=torch.float32) / 2
    with torch.no_grad(), rotary_positions(model, values.unsqueeze(0)):
        expected = model(ids).logits
    with torch.no_grad(), document(model, ids, LengthScale(2.0), swap, seed=7):
        assert torch.equal(model(ids).logits, expected)


def test_yarn_at_load_equals_a_model_built_with_that_config(tiny_path):
    from transformers import AutoConfig, AutoModelForCausalLM

    loaded = load_model(str(tiny_path), LengthYarn(2.0))
    config = AutoConfig.from_pretrained(tiny_path)
    config.rope_parameters = {
        "rope_type": "yarn",
        "factor": 2.0,
        "rope_theta": 10000.0,
        "original_max_position_embeddings": C,
    }
    config.max_position_embeddings = 2 * C
    built = AutoModelForCausalLM.from_config(config).eval()
    built.load_state_dict(loaded.state_dict())
    ids = _ids(120)
    with torch.no_grad():
        torch.testing.assert_close(loaded(ids).logits, built(ids).logits, rtol=0, atol=0)
