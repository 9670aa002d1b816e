"""The in-distribution window pass: its windows tile the tokens past C, and each token's
NLL is the model's own on exactly the context the plan gives it."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from tests.tiny_models import build_previous_token_model, build_short_context_model

from posgen.harness.length.window import context_range, window_nll, window_plan

pytestmark = pytest.mark.heavy

C = 64


@pytest.fixture(scope="module")
def model():
    return build_short_context_model("llama", max_positions=C)


def _ids(n: int) -> torch.Tensor:
    return torch.randint(3, 384, (1, n), generator=torch.Generator().manual_seed(11))


@pytest.mark.parametrize(("n", "stride"), [(128, 32), (100, 7), (65, 1), (200, 32)])
def test_plan_tiles_the_tokens_past_c_once_with_context_in_range(n, stride):
    seen = []
    for a, lo, hi in window_plan(n, C, stride):
        assert a >= 0 and a + C == hi and hi - lo <= stride
        context = [t - a for t in range(lo, hi)]  # tokens x_a … x_{t−1}
        low, high = context_range(C, stride)
        assert min(context) >= low and max(context) == high
        seen += range(lo, hi)
    assert seen == list(range(C, n))


@pytest.mark.parametrize("stride", [0, C, -3])
def test_plan_refuses_a_stride_outside_1_to_c_minus_1(stride):
    with pytest.raises(ValueError, match="window stride"):
        window_plan(3 * C, C, stride)


def _own_nll(model, ids: torch.Tensor, t: int, context: int) -> float:
    """−log p(x_t | the ``context`` tokens before it), the window run alone."""
    window = ids[:, t - context : t + 1]
    with torch.no_grad():
        logp = torch.log_softmax(model(window).logits[0, -2].double(), dim=-1)
    return float(-logp[ids[0, t]])


@pytest.mark.parametrize("stride", [1, 16])
def test_window_nll_is_the_model_on_each_tokens_own_window(model, stride):
    ids = _ids(C + 40)
    got = window_nll(model, ids, C, stride)
    assert np.isnan(got[:C]).all() and np.isfinite(got[C:]).all()
    np.testing.assert_allclose(window_nll(model, ids, C, stride, chunk=5), got, atol=1e-6)
    plan = {t: a for a, lo, hi in window_plan(ids.shape[1], C, stride) for t in range(lo, hi)}
    for t in range(C, ids.shape[1], 3):
        np.testing.assert_allclose(got[t], _own_nll(model, ids, t, t - plan[t]), atol=2e-5)


def test_stride_one_gives_every_token_exactly_c_minus_1_tokens_of_context(model):
    ids = _ids(C + 10)
    got = window_nll(model, ids, C, 1)
    expected = [_own_nll(model, ids, t, C - 1) for t in range(C, C + 10)]
    np.testing.assert_allclose(got[C:], expected, atol=2e-5)
    # and not the full-context NLL: the window really forgets what lies before it
    from posgen.harness.length.nll import position_nll

    assert np.abs(position_nll(model, ids)[C:] - got[C:]).max() > 1e-4


def _documents(model, kind: str, seeds: range) -> dict[str, list[int]]:
    """Greedy text of the previous-token model (easy for it) to 2C, or easy to C and
    uniform random tokens past C (a hard passage past C, hard for any context)."""
    docs = {}
    for seed in seeds:
        g = torch.Generator().manual_seed(seed)
        start = torch.randint(3, 300, (1, 2), generator=g)
        with torch.no_grad():
            easy = model.generate(
                start, max_new_tokens=2 * C, min_new_tokens=2 * C, do_sample=False
            )
        ids = easy[0, : 2 * C]
        if kind == "hard":
            ids = torch.cat([ids[:C], torch.randint(3, 300, (C,), generator=g)])
        docs[f"{kind}{seed}"] = ids.tolist()
    return docs


def _run(path, folder, docs: dict[str, list[int]]) -> dict:
    from posgen.harness.length.runner import read_results, run_documents
    from posgen.harness.loading import model_entries
    from posgen.results.folder.length_config import LengthConfig, LengthFolder
    from posgen.results.scores.length_window import read_windows, score_with_window

    (entry,) = model_entries([str(path)])
    config = LengthConfig(
        model=entry.label,
        max_length=2 * C,
        trained_context=C,
        schemes=("none", "scale:2.0"),
        documents=tuple(docs),
        bucket_width=16,
        window_stride=C // 2,
    )
    LengthFolder.start(folder, config)
    run_documents(folder, config, entry, "cpu", docs, lambda line: None)
    return score_with_window(read_results(folder, config), config, read_windows(folder, list(docs)))


def test_planted_failure_past_c_moves_the_new_figure_a_hard_passage_does_not(tmp_path):
    """The previous-token model predicts x_t from x_{t−2}, x_{t−1} only, through attention
    that finds the previous token by its relative position. So under ``none`` a token's NLL
    is the same with any context: its excess over the window is 0. ``scale:2`` halves the
    distances, the heads then read the wrong token: a failure, past C as everywhere. A
    passage of random tokens past C is hard for every scheme and for the window alike."""
    from tests.tiny_models import save_previous_token_model

    path = save_previous_token_model(tmp_path / "model")
    model = build_previous_token_model()
    easy = _run(path, tmp_path / "easy", _documents(model, "easy", range(3)))
    hard = _run(path, tmp_path / "hard", _documents(model, "hard", range(3)))
    assert easy["effective"]["none"]["censored"] and easy["effective_window"]["none"]["censored"]
    assert max(abs(r["excess"]) for r in easy["excess"] if r["scheme"] == "none") < 1e-4
    planted = easy["effective_window"]["scale:2.0"]
    assert not planted["censored"] and planted["effective_length"] == C  # the failure shows
    assert hard["effective"]["none"]["effective_length"] == C  # the old figure is fooled
    assert hard["effective_window"]["none"]["censored"]  # the new one is not
