"""posgen length on the non-rotary position families: ALiBi runs past C as it is (BLOOM,
MPT up to its max_seq_len, Falcon-ALiBi); what each family cannot take is refused in one
line before any weight loads."""

from __future__ import annotations

import json

import numpy as np
import pytest
import torch

from door_forwards import document
from posgen.harness.cli import main as cli_main
from posgen.harness.length.nll import position_nll
from posgen.perturbations import parse
from posgen.perturbations.length import LengthNone
from tiny_models import build_model

pytestmark = pytest.mark.heavy

ALIBI = ("bloom", "mpt", "falcon_alibi")


def _run(path, out, *extra: str) -> list[str]:
    argv = ["length", "--model", str(path), "--trained-context", "32", "--max-length", "96"]
    return [*argv, "--documents", "1", "--out", str(out), *extra]


def test_alibi_runs_past_its_trained_context_as_it_is(tiny_model_dir, tmp_path, capsys):
    out = tmp_path / "len"
    assert cli_main(_run(tiny_model_dir("bloom", 0), out)) == 0
    report = capsys.readouterr().out
    assert "| none |" in report and "| scale:" not in report  # only none ran
    scores = json.loads((out / "length_scores.json").read_text())
    assert set(scores["effective"]) == {"none"}
    assert max(c["stop"] for c in scores["curves"]) == 96  # measured past C = 32


@pytest.mark.parametrize("arch", ["mpt", "falcon_alibi"])
def test_mpt_and_falcon_run_past_c_with_drift(tiny_model_dir, tmp_path, capsys, arch):
    out = tmp_path / arch
    assert cli_main(_run(tiny_model_dir(arch, 0), out)) == 0
    assert "| none |" in capsys.readouterr().out
    scores = json.loads((out / "length_scores.json").read_text())
    assert set(scores["effective"]) == {"none"}
    assert max(c["stop"] for c in scores["curves"]) == 96
    (record,) = (out / "docs").glob("*/*.json")
    drift = json.loads(record.read_text())["drift"]
    assert drift is not None and len(drift["region_cos"]) == 2  # both layers captured


@pytest.mark.parametrize("arch", ["mpt", "falcon_alibi"])
def test_alibi_decompose_fits_its_full_logits(tiny_model_dir, tmp_path, capsys, arch):
    out = tmp_path / arch
    assert cli_main(_run(tiny_model_dir(arch, 0), out, "--decompose")) == 0
    assert "ALiBi: its full logits, bias included" in capsys.readouterr().out
    layers = json.loads((out / "length_scores.json").read_text())["decomposition"]["layers"]
    assert [(r["layer"], r["n_heads"]) for r in layers] == [(0, 4), (1, 4)]  # full part only


def _nll(out) -> list[float]:
    (record,) = (out / "docs").glob("*/*.json")
    return json.loads(record.read_text())["nll_sum"]


def test_mpt_decompose_beside_moved_positions_leaves_the_model_as_it_runs(tiny_model_dir, tmp_path):
    """On MPT the capture and --positions' moved bias wrap the one bias its attention
    adds; composed, the capture records the moved bias's logits and the model computes
    what it computes with the moved bias alone."""
    path, swap = tiny_model_dir("mpt", 0), ("--positions", "swap:0.3")
    runs = {"plain": (), "moved": swap, "moved+fit": (*swap, "--decompose")}
    for name, extra in runs.items():
        assert cli_main(_run(path, tmp_path / name, *extra)) == 0
    moved = _nll(tmp_path / "moved")
    np.testing.assert_allclose(_nll(tmp_path / "moved+fit"), moved, rtol=1e-6)
    assert not np.allclose(_nll(tmp_path / "plain"), moved, rtol=1e-4)
    scores = json.loads((tmp_path / "moved+fit" / "length_scores.json").read_text())
    assert [r["layer"] for r in scores["decomposition"]["layers"]] == [0, 1]


@pytest.mark.parametrize("arch", ALIBI)
def test_the_nll_is_the_models_own(arch):
    """The length run's forward (the decoder, then the LM head in chunks) gives the
    model's own log-probabilities on each ALiBi family."""
    model = build_model(arch)
    ids = torch.randint(3, 384, (1, 80), generator=torch.Generator().manual_seed(3))
    with torch.no_grad():
        logp = torch.log_softmax(model(ids).logits[0].double(), dim=-1)
    expected = -logp[:-1].gather(1, ids[0, 1:, None])[:, 0].numpy()
    with document(model, ids, LengthNone()):
        got = position_nll(model, ids, chunk=16)
    np.testing.assert_allclose(got[1:], expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("arch", ALIBI)
def test_a_position_scheme_moves_the_bias(arch):
    """--positions enters the bias every block is handed (Falcon-ALiBi's rotary module,
    which no layer applies, is not where its positions enter): a swap moves the NLL, a
    shift of every position (ALiBi is relative) does not."""
    model = build_model(arch)
    ids = torch.randint(3, 384, (1, 80), generator=torch.Generator().manual_seed(4))
    plain = position_nll(model, ids)
    for spec, moved in (("swap:0.3", True), ("shift:7", False)):
        with document(model, ids, LengthNone(), parse("position", spec), seed=1):
            got = position_nll(model, ids)
        assert np.allclose(got[1:], plain[1:], atol=1e-4) != moved, spec


REFUSED = [
    ("mpt", [], "its max_seq_len = 2048 keys and cannot run past them"),
    ("mpt", ["--trained-context", "32", "--max-length", "2049"], "max length 2049"),
    ("mpt", ["--trained-context", "1024", "--factor", "3"], "give --max-length <= 2048"),
    ("mpt", ["--schemes", "scale:2"], "only the scheme none applies"),
    ("falcon_alibi", ["--schemes", "none;yarn:2"], "only the scheme none applies"),
    ("smollm3_nope", ["--positions", "swap:0.1"], "there are no positions to move"),
]


@pytest.mark.parametrize(("arch", "args", "message"), REFUSED)
def test_what_a_family_cannot_take_is_refused_before_weights_load(
    tiny_model_dir, monkeypatch, tmp_path, capsys, arch, args, message
):
    from posgen.harness import loading

    path = tiny_model_dir(arch, 0)

    def refuse(*a, **k):
        raise AssertionError("weights or a tokenizer were loaded")

    monkeypatch.setattr(loading, "load_model", refuse)
    monkeypatch.setattr(loading, "load_tokenizer", refuse)
    capsys.readouterr()  # building the model (on first use) prints its own progress
    out = tmp_path / "out"
    assert cli_main(["length", "--model", str(path), "--out", str(out), *args]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not out.exists()


HF_POSGEN_REFUSED = [
    ("gpt2", "lambda:4:8", "has learned absolute positions", "cannot run past C; drop length="),
    ("opt", "none", "has learned absolute positions", "cannot run past C; drop length="),
    ("bloom", "infllm", "has ALiBi positions", "only the scheme none applies"),
    ("mpt", "yarn:2", "has ALiBi positions", "only the scheme none applies"),
    ("falcon_alibi", "scale:2", "has ALiBi positions", "only the scheme none applies"),
    ("smollm3_nope", "lambda:4:8", "has no position encoding", "only the scheme none applies"),
]


@pytest.mark.parametrize(("arch", "length", "family", "why"), HF_POSGEN_REFUSED)
def test_hf_posgen_refuses_a_length_scheme_from_the_config_before_weights_load(
    tiny_model_dir, monkeypatch, arch, length, family, why
):
    """``lm_eval --model hf-posgen --model_args ...,length=`` on a model whose positions are
    not rotary is refused from its config, in one line and in posgen length's words,
    before any weight loads (it was refused only once the weights had loaded)."""
    from lm_eval.models.huggingface import HFLM

    from posgen.harness.hf_posgen.model import HFPosgenLM
    from posgen.perturbations import PerturbationError

    path = str(tiny_model_dir(arch, 0))
    monkeypatch.setattr(HFLM, "__init__", lambda *a, **k: pytest.fail("weights loaded"))
    with pytest.raises(PerturbationError) as refused:
        HFPosgenLM(pretrained=path, device="cpu", length=length)
    message = str(refused.value)
    assert "\n" not in message and message.startswith(f"length={length.split(':')[0]}")
    assert family in message and why in message, message


def test_posgen_length_and_hf_posgen_refuse_in_the_same_words(tiny_model_dir, monkeypatch, capsys):
    from lm_eval.models.huggingface import HFLM

    from posgen.harness import loading
    from posgen.harness.hf_posgen.model import HFPosgenLM
    from posgen.perturbations import PerturbationError

    path = tiny_model_dir("bloom", 0)
    monkeypatch.setattr(HFLM, "__init__", lambda *a, **k: pytest.fail("weights loaded"))
    monkeypatch.setattr(loading, "load_model", lambda *a, **k: pytest.fail("weights loaded"))
    with pytest.raises(PerturbationError) as refused:
        HFPosgenLM(pretrained=str(path), device="cpu", length="scale:2")
    capsys.readouterr()
    argv = ["length", "--model", str(path), "--trained-context", "32", "--schemes", "scale:2"]
    assert cli_main(argv) == 2
    words = "has ALiBi positions and runs past C as it is; only the scheme none applies"
    assert words in capsys.readouterr().err and words in str(refused.value)


def test_hf_posgen_runs_length_none_on_alibi_as_the_plain_model(tiny_model_dir):
    """``none`` is the scheme posgen length runs on ALiBi: hf-posgen takes it too, and it is
    the plain model."""
    from lm_eval.api.instance import Instance
    from lm_eval.models.huggingface import HFLM

    from posgen.harness.hf_posgen.model import HFPosgenLM
    from tiny_models import training_text

    path = str(tiny_model_dir("bloom", 0))
    texts = [t[:200] for t in training_text()[:3]]
    reqs = [Instance("loglikelihood_rolling", None, (t,), i) for i, t in enumerate(texts)]
    plain = HFLM(pretrained=path, device="cpu", batch_size=2).loglikelihood_rolling(reqs)
    lm = HFPosgenLM(pretrained=path, device="cpu", batch_size=2, length="none")
    assert lm.loglikelihood_rolling(reqs) == plain
