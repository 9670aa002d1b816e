"""``logits=`` on ALiBi (BLOOM): the full logits its own ``baddbmm`` computes, bias
included, replaced by their exact additive fit where BLOOM computes them. Planted truth
(a BLOOM whose logits are its bias alone), the attention rows against the fit of the
captured logits, ``layers=``/``heads=`` exactness, padding, the refusals. Tiny random
BLOOMs on CPU, seconds: ``bloom_qk``, whose q·k matters beside the bias (at BLOOM's own
initialisation the logits are nearly the bias alone, which the fit leaves as it is)."""

from __future__ import annotations

import pytest
import torch

from posgen.harness.additive_fit.logit_fit import FitOptions, LayoutCache, fit_heads, fitted_map
from posgen.harness.decomposition.alibi_capture import alibi_capture_forward
from posgen.harness.decomposition.predicted_change import distance_terms
from posgen.harness.hf_posgen import alibi_bias
from posgen.harness.hf_posgen.logit_forms import LogitDonor, LogitForm
from posgen.harness.hf_posgen.logit_replacement import LogitReplacement, logits_replaced
from tiny_models import build_model

N = 48
HEADS = 4  # the tiny BLOOM's


def _ids(rows: int, n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, 384, (rows, n), generator=torch.Generator().manual_seed(seed))


def _bias_only_bloom() -> torch.nn.Module:
    """BLOOM whose queries are zero: q·k = 0, so each head's logits are its bias m_h·j
    alone, exactly additive (−m_h·(i − j) + m_h·i)."""
    model = build_model("bloom_qk")
    d = model.config.hidden_size // HEADS
    with torch.no_grad():
        for block in model.transformer.h:
            fused = block.self_attention.query_key_value  # outputs per head: (q, k, v) × d
            fused.weight.view(HEADS, 3, d, -1)[:, 0] = 0.0
            fused.bias.view(HEADS, 3, d)[:, 0] = 0.0
    return model


def _run(model, ids, attention_mask=None, **replace):
    """The model's output (with its attention rows and hidden states), plain or under
    ``logits=`` (``replace``: :class:`LogitReplacement`'s fields)."""
    kwargs = dict(attention_mask=attention_mask, output_attentions=True, output_hidden_states=True)
    with torch.no_grad():
        if not replace:
            return model(ids, **kwargs)
        with logits_replaced(model, LogitReplacement(**replace)):
            return model(ids, **kwargs)


def _causal_rows(logits: torch.Tensor) -> torch.Tensor:
    """Softmax rows [H, n, n] of ``logits`` over the causal entries (float64)."""
    n = logits.shape[-1]
    causal = torch.ones(n, n, dtype=torch.bool).tril()
    return torch.softmax(logits.double().masked_fill(~causal, -torch.inf), dim=-1)


def test_a_bloom_whose_logits_are_its_bias_alone_is_unchanged_by_its_fit():
    """The bias is the whole of the logits and exactly additive: ``additive`` and
    ``distance`` (a[i−j] + b[i] holds the bias) leave the model as it is; ``key`` drops
    the bias's trend, and each head then attends uniformly."""
    model, ids = _bias_only_bloom(), _ids(1, N)
    plain = _run(model, ids).logits
    for form in ("additive", "distance"):
        replaced = _run(model, ids, form=LogitForm(form)).logits
        assert (replaced - plain).abs().max() < 1e-5 * plain.abs().max(), form
    rows = _run(model, ids, form=LogitForm("key")).attentions[0][0]  # [H, n, n]
    uniform = _causal_rows(torch.zeros(HEADS, N, N))
    torch.testing.assert_close(rows.double(), uniform, atol=1e-5, rtol=0)
    assert (_run(model, ids).attentions[0][0] - rows).abs().max() > 0.1  # the bias's recency


def test_additive_is_the_softmax_of_the_fit_of_the_captured_full_logits():
    """Independently: the layer's full logits captured on a plain forward, fitted by the
    decomposition's fit (float64), softmaxed over the causal entries, are the rows BLOOM
    computes under ``logits=additive``; the fit of the full logits is the fit of q·k plus
    the bias (the bias is exactly additive)."""
    model, ids = build_model("bloom_qk"), _ids(1, N)
    caps = {}
    alibi_capture_forward(model, ids[0].tolist(), lambda cap: caps.setdefault(cap.layer, cap))
    layout = LayoutCache().causal(N, FitOptions())
    full = caps[0].logits[0].double()  # [H, n, n], bias included

    def fit(w: torch.Tensor) -> torch.Tensor:
        fits = fit_heads(w, layout)
        return torch.stack([fitted_map(fits, h, layout) for h in range(HEADS)])

    want = fit(full)
    qk, bias = caps[0].part(include_bias=False).logits[0].double(), caps[0].bias[0].double()
    causal = layout.mask
    torch.testing.assert_close((fit(qk) + bias)[:, causal], want[:, causal], atol=1e-5, rtol=0)
    replaced = _run(model, ids, form=LogitForm("additive"))
    assert (_causal_rows(full) - _causal_rows(want)).abs().max() > 1e-3  # the fit moves rows
    torch.testing.assert_close(
        replaced.attentions[0][0].double(), _causal_rows(want), atol=2e-6, rtol=0
    )
    assert (replaced.logits - _run(model, ids).logits).abs().max() > 1e-3


def test_layers_and_heads_restrict_it_and_the_rest_is_plain_bit_for_bit():
    model, ids = build_model("bloom_qk"), _ids(1, 32, seed=1)
    into_dense: list[torch.Tensor] = []
    dense = model.transformer.h[1].self_attention.dense
    handle = dense.register_forward_pre_hook(lambda m, args: into_dense.append(args[0].clone()))
    try:
        plain = _run(model, ids)
        moved = _run(model, ids, form=LogitForm("key"), layers=(1,), heads=(2,))
    finally:
        handle.remove()
    assert torch.equal(plain.hidden_states[1], moved.hidden_states[1])  # layer 0 is not replaced
    assert torch.equal(plain.attentions[0], moved.attentions[0])
    others = [0, 1, 3]
    assert torch.equal(plain.attentions[1][:, others], moved.attentions[1][:, others])
    assert not torch.allclose(plain.attentions[1][:, 2], moved.attentions[1][:, 2])
    before, after = (x.view(1, 32, HEADS, -1) for x in into_dense)  # [B, n, H, d]
    assert torch.equal(before[:, :, others], after[:, :, others])
    assert not torch.equal(before[:, :, 2], after[:, :, 2])


@pytest.mark.parametrize("form", ["additive", "shuffled"])
def test_a_right_padded_batch_without_a_mask_fits_each_row_as_alone(form):
    """HFLM's call: right-padded rows, no mask; the plan's ``lengths`` say where each row
    ends, and padding enters no fit."""
    model, ids = build_model("bloom_qk"), _ids(2, 40)
    ids[1, 29:] = 0
    keys = (b"a", b"b")
    both = _run(model, ids, form=LogitForm(form), keys=keys, lengths=(40, 29)).logits
    alone = _run(model, ids[1:, :29], form=LogitForm(form), keys=keys[1:]).logits
    torch.testing.assert_close(both[1, :29], alone[0], atol=1e-5, rtol=0)
    guessed = _run(model, ids, form=LogitForm(form), keys=keys, lengths=(40, 40)).logits
    assert (guessed[1, :29] - alone[0]).abs().max() > 1e-3  # padding in the fit
    mask = torch.ones(2, 40, dtype=torch.long)
    mask[1, 29:] = 0  # a mask that agrees: the same rows (BLOOM's bias then comes from it)
    masked = _run(model, ids, mask, form=LogitForm(form), keys=keys, lengths=(40, 29)).logits
    torch.testing.assert_close(masked[1, :29], alone[0], atol=1e-5, rtol=0)


def test_foreign_with_the_sequence_itself_as_donor_is_the_fit():
    """The donor's distance terms come from the same wrapped bias (the full logits of a
    plain forward: in layer 0 they are the replaced layer's own)."""
    model, ids = build_model("bloom_qk"), _ids(1, N)
    donor = LogitDonor(distance_terms(model, ids[0].tolist()), "itself")
    assert set(donor.a) == {0, 1} and donor.a[0].shape == (HEADS, N)
    own = _run(model, ids, form=LogitForm("additive"), layers=(0,)).logits
    foreign = _run(model, ids, form=LogitForm("foreign"), donor=donor, layers=(0,)).logits
    assert (own - _run(model, ids).logits).abs().max() > 1e-2
    torch.testing.assert_close(foreign, own, atol=1e-5, rtol=0)


def test_a_forward_after_a_kv_cache_is_refused():
    model, ids = build_model("bloom_qk"), _ids(1, 12)
    with torch.no_grad(), logits_replaced(model, LogitReplacement(LogitForm("additive"))):
        first = model(ids[:, :10], use_cache=True)
        with pytest.raises(RuntimeError, match="whole forwards only"):
            model(ids[:, 10:], cache=first.past_key_values)


def test_an_attention_that_computes_no_logits_through_its_bias_is_refused(monkeypatch):
    """Were BLOOM's attention to stop calling ``alibi.baddbmm``, the replacement would
    silently do nothing: the call is refused instead."""
    monkeypatch.setattr(alibi_bias._WrappedBias, "baddbmm", torch.Tensor.baddbmm)
    model, ids = build_model("bloom_qk"), _ids(1, 8)
    with pytest.raises(RuntimeError, match=r"did not compute its logits as alibi\.baddbmm"):
        _run(model, ids, form=LogitForm("additive"))
