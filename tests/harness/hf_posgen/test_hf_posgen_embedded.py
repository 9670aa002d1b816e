"""hf-posgen on the real embedded SmolLM2-135M (slow tier): exactness where it matters."""

from __future__ import annotations

import pytest
from lm_eval.api.instance import Instance
from lm_eval.models.huggingface import HFLM

from generation_requests import generate, rotary_inputs
from posgen.harness.hf_posgen.model import HFPosgenLM

pytestmark = pytest.mark.slow

TEXTS = [
    "The quick brown fox jumps over the lazy dog, and the dog does not mind at all.",
    "To be, or not to be, that is the question: whether 'tis nobler in the mind to suffer "
    "the slings and arrows of outrageous fortune, or to take arms against a sea of troubles.",
    "Water boils at one hundred degrees Celsius at sea level.",
    "In the beginning the Universe was created. This has made a lot of people very angry "
    "and been widely regarded as a bad move.",
    "Rain.",
]


def rolling(lm, bs: int) -> list[float]:
    lm.batch_size_per_gpu = bs
    reqs = [Instance("loglikelihood_rolling", None, (t,), i) for i, t in enumerate(TEXTS)]
    return lm.loglikelihood_rolling(reqs, disable_tqdm=True)


@pytest.fixture(scope="module")
def models(embedded_model_dir):
    path = str(embedded_model_dir)
    return HFLM(pretrained=path, device="cpu"), HFPosgenLM(pretrained="embedded", device="cpu")


def test_identity_shift_and_batch_size_on_the_real_model(models):
    hf, lm = models
    plain = {bs: rolling(hf, bs) for bs in (1, 4)}
    lm.set_perturbation("swap:0", None, seed=1)
    assert rolling(lm, 4) == plain[4]
    lm.set_perturbation("shift:100", None, seed=1)
    n_tokens = [len(lm.tok_encode(t)) for t in TEXTS]
    shifted = rolling(lm, 4)
    per_token = [abs(a - b) / n for a, b, n in zip(shifted, plain[4], n_tokens, strict=True)]
    assert max(per_token) < 1e-4, per_token
    hf_drift = max(abs(a - b) / abs(b) for a, b in zip(plain[4], plain[1], strict=True))
    for positions, features in (("swap:0.2", None), (None, "rope_noise:1"), (None, "qk_noise:0.1")):
        lm.set_perturbation(positions, features, seed=1)
        one, four = rolling(lm, 1), rolling(lm, 4)
        assert one != plain[1]
        drift = max(abs(a - b) / abs(b) for a, b in zip(four, one, strict=True))
        assert drift < 1e-5 and drift <= hf_drift + 1e-6, (positions, features, drift)


def test_generation_on_the_real_model(models, monkeypatch):
    """Identity generates token for token what plain hf generates at batch 1. At batch 3
    with contexts of different lengths (pad token == EOS, as SmolLM2 has), lm-eval's
    attention mask gives each row its own count of real tokens, and batched generation
    equals one-by-one generation, for plain hf and under swap:0.2."""
    hf, lm = models
    prompts = [TEXTS[0], TEXTS[2], TEXTS[4]]
    assert hf.tokenizer.pad_token_id == hf.tokenizer.eos_token_id
    plain = generate(hf, batch_size=1, prompts=prompts, new_tokens=16)
    lm.set_perturbation("swap:0", None, seed=1)
    assert generate(lm, batch_size=1, prompts=prompts, new_tokens=16) == plain
    seen = rotary_inputs(hf.model, monkeypatch)
    assert generate(hf, batch_size=3, prompts=prompts, new_tokens=16) == plain
    lengths = sorted((len(hf.tok_encode(p)) for p in prompts), reverse=True)
    width = lengths[0]
    assert seen[0].tolist() == [[0] * (width - n) + list(range(n)) for n in lengths]
    assert seen[1].tolist() == [[n] for n in lengths]
    lm.set_perturbation("swap:0.2", None, seed=1)
    swapped = generate(lm, batch_size=1, prompts=prompts, new_tokens=16)
    assert generate(lm, batch_size=3, prompts=prompts, new_tokens=16) == swapped
    assert swapped != plain
