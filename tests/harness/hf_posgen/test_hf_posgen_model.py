"""Integration tests of hf-posgen on tiny random-weight models (CPU, seconds)."""

from __future__ import annotations

import pytest
import torch
from lm_eval.api.instance import Instance
from lm_eval.api.model import CachingLM
from lm_eval.models.huggingface import HFLM

from posgen.harness.hf_posgen.model import HFPosgenLM
from posgen.harness.model_side.positions.rotary import rotary_positions
from posgen.perturbations import PerturbationError
from scoring_requests import TEXTS, pairs, rolling
from tiny_models import ROPE_ARCHS

pytestmark = pytest.mark.heavy


def at_batch_size(lm, bs: int, fn=rolling) -> list[float]:
    lm.batch_size_per_gpu = bs
    return fn(lm)


def max_rel(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) / abs(y) for x, y in zip(a, b, strict=True))


@pytest.fixture(scope="module")
def llama(tiny_model_dir):
    return str(tiny_model_dir("llama"))


@pytest.fixture(scope="module")
def hf_llama(llama):
    return HFLM(pretrained=llama, device="cpu", batch_size=4)


IDENTITIES = [
    ("swap:0", None),
    ("shift:0", None),
    ("adjacent:0", None),
    ("scale:1", None),
    (None, "rope_noise:0"),
    (None, "qk_noise:0"),
    ("swap:0", "qk_noise:0"),
    (None, None),
]


def test_identity_is_bit_identical_to_hf(llama, hf_llama):
    lm = HFPosgenLM(pretrained=llama, device="cpu", batch_size=4, positions="swap:0")
    expected_rolling, expected_pairs = rolling(hf_llama), pairs(hf_llama)
    for positions, features in IDENTITIES:
        lm.set_perturbation(positions, features, seed=3)
        assert rolling(lm) == expected_rolling, (positions, features)
        assert pairs(lm) == expected_pairs, (positions, features)


@pytest.mark.parametrize("arch", ROPE_ARCHS)
def test_rotary_hook_with_identity_positions_is_bit_identical(tiny_model_dir, arch):
    """The mechanism itself: the pre-hook fed t (not skipped) reproduces the logits."""
    lm = HFLM(pretrained=str(tiny_model_dir(arch)), device="cpu")
    ids = torch.tensor([lm.tok_encode(TEXTS[7])[:90]] * 3)
    plain = lm.model(ids).logits
    with rotary_positions(lm.model, torch.arange(ids.shape[1]).expand(3, -1)):
        hooked = lm.model(ids).logits
    assert torch.equal(plain, hooked)
    with rotary_positions(lm.model, torch.arange(ids.shape[1]).flip(0).expand(3, -1)):
        assert not torch.equal(plain, lm.model(ids).logits)  # the hook does act
    assert torch.equal(plain, lm.model(ids).logits)  # and is removed


@pytest.mark.parametrize("arch", ROPE_ARCHS)
def test_every_rope_family(tiny_model_dir, arch):
    """Each scheme acts; shift is RoPE-relative (<1e-4); batch sizes 1/4/16 agree (1e-5)
    and no worse than plain hf between the same batch sizes."""
    path = str(tiny_model_dir(arch))
    hf = HFLM(pretrained=path, device="cpu")
    hf_runs = {bs: at_batch_size(hf, bs) for bs in (1, 4, 16)}
    lm = HFPosgenLM(pretrained=path, device="cpu", positions="shift:37")
    shifted = at_batch_size(lm, 4)
    n_tokens = [len(lm.tok_encode(t)) for t in TEXTS]
    assert max(abs(a - b) / n for a, b, n in zip(shifted, hf_runs[4], n_tokens, strict=True)) < 1e-4
    assert max_rel(shifted, hf_runs[4]) < 1e-4
    for positions, features, sizes in (
        ("swap:0.2", None, (1, 16)),
        (None, "rope_noise:0.7", (1, 16)),
        (None, "qk_noise:0.2", (1, 16)),
        ("local_shuffle:3", "rope_noise:0.3", (1, 4)),
    ):
        lm.set_perturbation(positions, features, seed=11)
        runs = [at_batch_size(lm, bs) for bs in sizes]
        assert runs[0] != hf_runs[1], (positions, features)
        drift, hf_drift = max_rel(runs[1], runs[0]), max_rel(hf_runs[sizes[1]], hf_runs[1])
        assert drift < 1e-5 and drift <= hf_drift + 1e-6, (positions, features, drift, hf_drift)


def test_loglikelihood_requests_are_batch_size_invariant(llama):
    lm = HFPosgenLM(pretrained=llama, device="cpu", positions="shuffle", features="qk_noise:0.3")
    one, many = at_batch_size(lm, 1, pairs), at_batch_size(lm, 16, pairs)
    assert max_rel(many, one) < 1e-5


def test_auto_batch_size_probes_do_not_disturb_the_length_queue(llama):
    common = dict(pretrained=llama, device="cpu", positions="swap:0.3", max_length=256)
    auto = HFPosgenLM(batch_size="auto:2", max_batch_size=4, **common)
    fixed = HFPosgenLM(batch_size=1, **common)
    assert max_rel(pairs(auto), pairs(fixed)) < 1e-5


def test_set_perturbation_matches_a_fresh_model(llama):
    fresh = HFPosgenLM(
        pretrained=llama,
        device="cpu",
        batch_size=4,
        positions="swap:0.3",
        features="rope_noise:0.2",
        perturb_seed=5,
    )
    switched = HFPosgenLM(pretrained=llama, device="cpu", batch_size=4)
    base = rolling(switched)
    switched.set_perturbation("swap:0.3", "rope_noise:0.2", seed=5)
    assert rolling(switched) == rolling(fresh)
    switched.set_perturbation("swap:0.3", "rope_noise:0.2", seed=6)
    assert rolling(switched) != rolling(fresh)  # the seed matters
    switched.set_perturbation(None, None, seed=5)
    assert rolling(switched) == base


@pytest.mark.parametrize(
    "kwargs",
    [
        {"positions": "swap:1.5"},
        {"positions": "swap:-0.1"},
        {"positions": "local_shuffle:1"},
        {"positions": "twirl"},
        {"features": "rope_noise:-1"},
        {"features": "qk_noise:-0.1"},
        {"features": "jitter:0.1"},
        {"perturb_seed": "abc"},
    ],
)
def test_invalid_specs_fail_before_the_weights_load(monkeypatch, kwargs):
    def no_loading(*args, **kw):
        raise AssertionError("weights were loaded before the spec was checked")

    monkeypatch.setattr(HFLM, "__init__", no_loading)
    with pytest.raises(PerturbationError) as err:
        HFPosgenLM(pretrained="/no/such/model", **kwargs)
    if "perturb_seed" not in kwargs:
        assert "Accepted" in str(err.value) and (
            "swap:RATE" in str(err.value) or "rope_noise:SIGMA" in str(err.value)
        )


@pytest.mark.parametrize(
    "name", ["positions", "features", "perturb_seed", "length", "layers", "heads", "logits"]
)
@pytest.mark.parametrize("empty", ["", "  "])
def test_an_empty_model_argument_fails_before_the_weights_load(monkeypatch, name, empty):
    """``--model_args ...,logits=`` reaches hf-posgen as ``logits=''``: it would run the
    plain model (or, for layers=, every layer) under a name that says otherwise."""

    def no_loading(*args, **kw):
        raise AssertionError("weights were loaded before the spec was checked")

    monkeypatch.setattr(HFLM, "__init__", no_loading)
    with pytest.raises(PerturbationError) as err:
        HFPosgenLM(pretrained="/no/such/model", **{name: empty})
    assert str(err.value).startswith(f"{name}= is empty: give ")
    assert str(err.value).endswith(f", or leave {name}= out") and "\n" not in str(err.value)


@pytest.mark.parametrize("form", ["additive", "key"])
def test_logits_beside_lambda_attention_fails_before_the_weights_load(monkeypatch, form):
    def no_loading(*args, **kw):
        raise AssertionError("weights were loaded before the spec was checked")

    monkeypatch.setattr(HFLM, "__init__", no_loading)
    with pytest.raises(PerturbationError) as err:
        HFPosgenLM(pretrained="/no/such/model", logits=form, length="lambda:4:64")
    assert str(err.value) == (
        f"logits={form} and length=lambda:4,64 both replace the attention function; "
        "run them apart (drop logits= or length=)"
    )


def test_gpt2_moves_its_learned_positions_and_refuses_what_has_no_meaning(tiny_model_dir):
    """GPT-2's positions are a learned table (posgen.harness.model_side.family): positions=
    and rope_noise act there (tests/harness/model_side/positions/test_non_rotary.py); qk noise
    and layers= are refused in one line; text still runs as plain hf."""
    path = str(tiny_model_dir("gpt2"))
    for kwargs, message in (
        ({"features": "qk_noise:0.1"}, "use features=rope_noise"),
        ({"positions": "swap:0.05", "layers": "1"}, "positions enter once"),
    ):
        with pytest.raises(PerturbationError, match=message):
            HFPosgenLM(pretrained=path, device="cpu", **kwargs)
    lm = HFPosgenLM(pretrained=path, device="cpu", batch_size=4)
    plain = rolling(HFLM(pretrained=path, device="cpu", batch_size=4))
    assert rolling(lm) == plain
    lm.set_perturbation("shift:3", None, seed=1)
    assert rolling(lm) != plain


def test_use_cache_never_crosses_perturbations(llama, hf_llama, tmp_path, monkeypatch):
    lm = HFPosgenLM(pretrained=llama, device="cpu", batch_size=4, positions="swap:0.3")
    cached = CachingLM(lm, str(tmp_path / "cache.db"))
    swapped = cached.loglikelihood_rolling(
        [Instance("loglikelihood_rolling", None, (t,), i) for i, t in enumerate(TEXTS)]
    )
    lm.set_perturbation(None, None, seed=1234)
    plain = cached.loglikelihood_rolling(
        [Instance("loglikelihood_rolling", None, (t,), i) for i, t in enumerate(TEXTS)]
    )
    assert plain == rolling(hf_llama) and plain != swapped
    lm.set_perturbation("swap:0.3", None, seed=99)
    assert cached.loglikelihood_rolling(
        [Instance("loglikelihood_rolling", None, (t,), i) for i, t in enumerate(TEXTS)]
    ) not in (swapped, plain)
    # Back to the first spec: every answer comes from the cache, none from the model.
    lm.set_perturbation("swap:0.3", None, seed=1234)
    monkeypatch.setattr(HFLM, "_model_call", lambda *a, **k: pytest.fail("cache missed"))
    assert (
        cached.loglikelihood_rolling(
            [Instance("loglikelihood_rolling", None, (t,), i) for i, t in enumerate(TEXTS)]
        )
        == swapped
    )


def test_model_info_records_the_specs(llama):
    lm = HFPosgenLM(
        pretrained=llama,
        device="cpu",
        positions="adjacent:0.1",
        features="rope_noise:0.25",
        perturb_seed=9,
    )
    info = lm.get_model_info()["posgen"]
    assert info["positions_str"] == "adjacent:0.1" and info["features_str"] == "rope_noise:0.25"
    assert info["positions"]["params"] == {"rate": 0.1} and info["perturb_seed"] == 9


def test_register_resolves_through_lm_eval(llama):
    from lm_eval.api.registry import get_model

    from posgen.lm_eval_plugin import register_model

    register_model()
    register_model()  # idempotent
    assert get_model("hf-posgen") is HFPosgenLM
    assert get_model("hf") is HFLM
    lm = HFPosgenLM.create_from_arg_string(
        f"pretrained={llama},positions=shift:2", {"device": "cpu", "batch_size": 2}
    )
    assert lm.perturbation.positions.to_string() == "shift:2"


def test_pyproject_declares_the_upstream_model_entry_point():
    from pathlib import Path

    tomllib = pytest.importorskip("tomllib")  # Python >= 3.11
    pyproject = Path(__file__).resolve().parents[3] / "pyproject.toml"
    eps = tomllib.loads(pyproject.read_text())["project"]["entry-points"]["lm_eval.models"]
    from posgen.lm_eval_plugin import MODEL_NAME, MODEL_TARGET

    assert eps == {MODEL_NAME: MODEL_TARGET}
    module, _, attr = MODEL_TARGET.partition(":")
    assert getattr(__import__(module, fromlist=[attr]), attr) is HFPosgenLM
