"""``infllm`` as a length scheme where users meet it: ``posgen length`` (with
``--decompose``), ``hf-posgen length=`` (batch invariance, generation refused), its
syntax, its C-scaled defaults, and every bad parameter refused before weights load."""

from __future__ import annotations

import json
import re

import pytest
from lm_eval.api.instance import Instance
from tests.tiny_models import build_tokenizer, training_text

from posgen.harness.cli import main as cli_main
from posgen.harness.hf_posgen.model import HFPosgenLM
from posgen.perturbations import PerturbationError
from posgen.perturbations.length import LengthInfLLM, parse_length, parse_length_list
from posgen.results.scores.length_decompose import decomposition_path

pytestmark = pytest.mark.heavy

C = 64
SCHEME = "infllm:n_init=2,n_local=16,block_size=4,topk=2,repr_topk=2,exc_block_size=8"


def test_syntax_round_trips_and_model_args_form_is_accepted():
    scheme = parse_length(SCHEME)
    assert scheme == LengthInfLLM(2, 16, 4, 2, 2, 8)
    assert parse_length(scheme.to_string()) == scheme
    assert parse_length(SCHEME.replace(",", ":")) == scheme  # lm-eval's --model_args
    assert parse_length("infllm") == LengthInfLLM()
    assert parse_length("infllm:topk=4").to_string() == "infllm:topk=4"


def test_defaults_are_infllms_own_at_8192_and_scaled_below():
    (at_8k,) = parse_length_list("infllm", 8192)
    assert at_8k == LengthInfLLM(128, 4096, 128, 16, 4, 512)  # InfLLM's published config
    (at_32k,) = parse_length_list("infllm", 32768)
    assert at_32k == at_8k  # nothing exceeds C: unchanged
    (at_2k,) = parse_length_list("infllm", 2048)
    assert at_2k == LengthInfLLM(32, 1024, 32, 16, 4, 128)  # n_local = C/2, sizes × 1/4
    (given,) = parse_length_list("infllm:topk=3,n_local=1024", 8192)
    assert (given.topk, given.n_local, given.block_size) == (3, 1024, 32)
    assert at_8k.spec.to_dict()["params"]["n_local"] == 4096  # recorded in every row


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("infllm:n_local=0", "n_local must be a positive integer"),
        ("infllm:block_size=-4", "block_size must be a positive integer"),
        ("infllm:topk=0", "topk must be a positive integer"),
        ("infllm:repr_topk=0", "repr_topk must be a positive integer"),
        ("infllm:exc_block_size=0", "exc_block_size must be a positive integer"),
        ("infllm:n_init=0", "n_init must be a positive integer"),
        ("infllm:block_size=2,repr_topk=3", "repr_topk .3. must be <= block_size"),
        ("infllm:n_local=8,exc_block_size=16", "must be <= n_local"),
        ("infllm:window=4", "not KEY=VALUE"),
        ("infllm:topk=x", "not an integer"),
        ("infllm:topk=2,topk=3", "given twice"),
    ],
)
def test_bad_parameters_are_refused(text, match):
    with pytest.raises(PerturbationError, match=match):
        parse_length(text)


def test_window_at_or_past_the_context_is_refused():
    with pytest.raises(PerturbationError, match=r"n_local \(64\) must be < the trained context"):
        parse_length_list("infllm:n_local=64,exc_block_size=8", C)


def _no_load(monkeypatch):
    from posgen.harness import loading

    def no_load(*a, **k):
        raise AssertionError("the model was loaded")

    monkeypatch.setattr(loading, "load_model", no_load)


@pytest.mark.parametrize(
    ("schemes", "match"),
    [
        ("infllm:topk=0", "topk must be a positive integer"),
        ("infllm:n_local=-1", "n_local must be a positive integer"),
        ("infllm:block_size=0", "block_size must be"),
        ("infllm:n_local=64", r"n_local \(64\) must be < the trained context C = 64"),
        ("none;infllm:n_local=100", r"n_local \(100\) must be <"),
    ],
)
def test_posgen_length_refuses_bad_infllm_in_one_line(
    tiny_path, tmp_path, schemes, match, capsys, monkeypatch
):
    _no_load(monkeypatch)
    out = tmp_path / "x"
    argv = ["length", "--model", str(tiny_path), "--documents", "1", "--out", str(out)]
    assert cli_main([*argv, "--schemes", schemes]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and re.search(match, err), err
    assert not out.exists()


@pytest.mark.parametrize(
    ("arch", "why"),
    [("gpt2", "cannot run past C"), ("bloom", "only the scheme none applies")],
)
def test_posgen_length_refuses_infllm_on_a_model_without_rope(
    tmp_path, capsys, monkeypatch, arch, why
):
    """A learned table cannot run past C at all; ALiBi runs past C as it is, so a length
    scheme (infllm among them) has nothing to act on: one line each, before weights load."""
    from tests.tiny_models import build_model

    path = tmp_path / arch
    build_model(arch).save_pretrained(path)
    build_tokenizer().save_pretrained(path)
    _no_load(monkeypatch)
    capsys.readouterr()
    argv = ["length", "--model", str(path), "--documents", "1", "--out", str(tmp_path / "o")]
    assert cli_main([*argv, "--schemes", "infllm:n_local=16", "--trained-context", "64"]) == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and why in err, err


@pytest.mark.parametrize(
    ("length", "match"),
    [
        ("infllm:topk=0", "topk must be a positive integer"),
        ("infllm:n_local=64", "must be < the trained context C = 64"),
        ("infllm:n_local=16:block_size=0", "block_size must be"),
    ],
)
def test_hf_posgen_refuses_bad_infllm_before_the_weights_load(
    tiny_path, length, match, monkeypatch
):
    from lm_eval.models.huggingface import HFLM

    def no_load(*a, **k):
        raise AssertionError("the weights were loaded")

    monkeypatch.setattr(HFLM, "__init__", no_load)
    with pytest.raises(PerturbationError, match=match):
        HFPosgenLM(pretrained=str(tiny_path), device="cpu", length=length)


def test_hf_posgen_refuses_infllm_without_rope(tmp_path):
    from tests.tiny_models import build_model

    path = tmp_path / "gpt2"
    build_model("gpt2").save_pretrained(path)
    with pytest.raises(PerturbationError, match="learned absolute positions"):
        HFPosgenLM(pretrained=str(path), device="cpu", length="infllm:n_local=16")


def _requests() -> list[Instance]:
    texts = [t[: 150 + 70 * i] for i, t in enumerate(training_text()[:8])]
    reqs = []
    for i, text in enumerate(texts):
        cut = len(text) // 3
        reqs.append(Instance("loglikelihood", None, (text[:cut], text[cut:]), i))
    return reqs


def test_hf_posgen_infllm_is_batch_invariant_and_refuses_generation(tiny_path):
    common = dict(pretrained=str(tiny_path), device="cpu", max_length=256)
    one = HFPosgenLM(batch_size=1, length=SCHEME.replace(",", ":"), **common)
    eight = HFPosgenLM(batch_size=8, length=SCHEME.replace(",", ":"), **common)
    plain = HFPosgenLM(batch_size=8, **common)
    reqs = _requests()
    got_one = [r[0] for r in one.loglikelihood(reqs, disable_tqdm=True)]
    got_eight = [r[0] for r in eight.loglikelihood(reqs, disable_tqdm=True)]
    base = [r[0] for r in plain.loglikelihood(reqs, disable_tqdm=True)]
    assert got_one == pytest.approx(got_eight, rel=1e-5, abs=1e-4)
    assert max(abs(a - b) for a, b in zip(got_one, base, strict=True)) > 1e-3
    assert one.get_model_info()["posgen"]["length_str"] == SCHEME
    gen = Instance("generate_until", None, ("hello", {"max_gen_toks": 4}), 0)
    with pytest.raises(NotImplementedError, match="generate_until under length=infllm"):
        one.generate_until([gen], disable_tqdm=True)


def test_posgen_length_decompose_runs_infllm_beside_lambda(tiny_path, tmp_path):
    out = tmp_path / "run"
    argv = ["length", "--model", str(tiny_path), "--documents", "1", "--out", str(out)]
    argv += ["--schemes", f"lambda:2,16;{SCHEME}", "--max-length", str(2 * C)]
    assert cli_main([*argv, "--bucket-width", "16", "--decompose"]) == 0
    config = json.loads((out / "config.json").read_text())["config"]
    assert config["schemes"] == ["lambda:2,16", SCHEME]
    (doc,) = config["documents"]
    record = json.loads(decomposition_path(out, SCHEME, doc).read_text())
    assert record["spec"]["params"]["topk"] == 2
    assert {h["fit_mask"] for h in record["heads"]} == {"infllm-local:16"}  # its local window
    scores = json.loads((out / "length_scores.json").read_text())
    layers = scores["decomposition"]["layers"]
    assert {r["scheme"] for r in layers} == {"lambda:2,16", SCHEME}
    assert f"`{SCHEME}`" in (out / "length.md").read_text()


def test_infllm_length_cells_reach_the_gate(tiny_path, tmp_path):
    """``posgen check``'s length section holds one cell per scheme, infllm's among them."""
    import shutil

    from posgen.results.folder.store import slug
    from posgen.results.gate.length import length_section

    out = tmp_path / "one"
    argv = ["length", "--model", str(tiny_path), "--documents", "2", "--out", str(out)]
    argv += ["--schemes", f"none;{SCHEME}", "--max-length", str(2 * C), "--bucket-width", "16"]
    assert cli_main(argv) == 0
    model = json.loads((out / "config.json").read_text())["config"]["model"]
    run_root = tmp_path / "run"
    shutil.copytree(out, run_root / "length" / slug(model))
    section = length_section(run_root, model)
    assert {cell["scheme"] for cell in section["cells"]} == {"none", SCHEME}
    assert section["settings"]["schemes"] == ["none", SCHEME]


def test_posgen_decompose_runs_infllm_completed_from_c(tiny_model_dir, tmp_path, capsys):
    import argparse

    import pandas as pd

    from posgen.harness.cli import decompose

    parser = argparse.ArgumentParser()
    decompose.configure_parser(parser)
    model = str(tiny_model_dir("llama", 0))
    argv = ["--model", model, "--docs", "1", "--tokens", "40", "--device", "cpu"]
    argv += ["--trained-context", "24", "--out", str(tmp_path / "out"), "--length"]
    assert decompose.main(parser.parse_args([*argv, "infllm:topk=1"])) == 0
    table = pd.read_parquet(tmp_path / "out" / "heads.parquet")
    expected = "infllm:n_init=1,n_local=12,block_size=1,topk=1,repr_topk=1,exc_block_size=2"
    assert (table["length"] == expected).all() and (table["fit_mask"] == "infllm-local:12").all()
    capsys.readouterr()
    assert decompose.main(parser.parse_args([*argv, "infllm:n_local=24"])) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "must be < the trained context C = 24" in err, err


def test_a_long_schemes_folder_keeps_its_name_and_an_earlier_folder_resumes(
    tiny_path, tmp_path, monkeypatch, capsys
):
    """A scheme's records folder was named by the last 48 characters of a long scheme
    (``block_size_4_topk_2_…``, its name cut off): now by its first, within 57 characters, the
    hash unchanged. A folder an earlier release wrote under the old name resumes (nothing
    recomputed, no model loaded) and re-reports in place."""
    import shutil

    from posgen.results.folder.store import slug
    from posgen.results.scores.length import result_path

    out = tmp_path / "run"
    argv = ["length", "--model", str(tiny_path), "--documents", "1", "--out", str(out)]
    argv += ["--schemes", f"none;{SCHEME}", "--max-length", str(2 * C), "--bucket-width", "16"]
    assert cli_main(argv) == 0
    names = sorted(p.name for p in (out / "docs").iterdir())
    assert names == sorted([slug("none"), slug(SCHEME, front=True)])  # none: as before
    (doc,) = json.loads((out / "config.json").read_text())["config"]["documents"]
    folder = result_path(out, SCHEME, doc).parent
    assert folder.name.startswith("infllm_n_init_2_n_local_16_") and len(folder.name) <= 57
    assert folder.name.endswith(slug(SCHEME)[-9:])  # the same hash as the old name
    earlier = out / "docs" / slug(SCHEME)  # the name today's release gave it
    assert earlier.name.startswith("block_size_4_topk_2_")  # its front cut off
    shutil.move(folder, earlier)
    (out / "length.md").unlink()
    _no_load(monkeypatch)
    capsys.readouterr()
    assert cli_main(argv) == 0
    assert result_path(out, SCHEME, doc).parent == earlier
    assert SCHEME in (out / "length.md").read_text()  # re-reported from the earlier folder
    assert SCHEME in json.loads((out / "length_scores.json").read_text())["effective"]
    assert sorted(p.name for p in (out / "docs").iterdir()) == sorted([slug("none"), earlier.name])
