"""``logits=`` on ALiBi (BLOOM, MPT): the full logits the model's own attention forms, bias
included (BLOOM's ``baddbmm``, MPT's ``scores + position_bias``), replaced by their exact
additive fit there; the model's own code then masks them (BLOOM's additive mask, MPT's
boolean one, True where masked) and softmaxes. Planted truth (a model whose logits are its
bias alone), the attention rows against the fit of the captured logits,
``layers=``/``heads=`` exactness, padding, positions moved beside it (MPT), the mask forms
and the refusals. Tiny random models on CPU, seconds: ``bloom_qk`` and ``mpt_qk``, whose
q·k matters beside the bias (at their own initialisation the logits are nearly the bias
alone, which the fit leaves as it is)."""

from __future__ import annotations

import pytest
import torch

from posgen.harness.additive_fit.logit_fit import FitOptions, LayoutCache, fit_heads, fitted_map
from posgen.harness.decomposition.predicted_change import distance_terms
from posgen.harness.model_side.alibi import bias as alibi_bias
from posgen.harness.model_side.alibi import rows as alibi_rows
from posgen.harness.model_side.alibi.capture import alibi_capture_forward
from posgen.harness.model_side.logits.forms import LogitDonor, LogitForm
from posgen.harness.model_side.logits.replacement import LogitReplacement, logits_replaced
from posgen.harness.model_side.positions.non_rotary import alibi_positions, full_forward_keys
from posgen.harness.position_family import position_family_of
from tiny_models import build_model

N = 48
HEADS, WIDTH = 4, 64  # the tiny BLOOM's and MPT's
ARCHS = ("bloom_qk", "mpt_qk")


def _ids(rows: int, n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, 384, (rows, n), generator=torch.Generator().manual_seed(seed))


def _bias_only(arch: str) -> torch.nn.Module:
    """A model whose queries are zero: q·k = 0, so each head's logits are its bias alone
    (BLOOM's m_h·j, MPT's m_h·(j − n + 1)), exactly additive (−m_h·(i − j) + a row term)."""
    model = build_model(arch)
    d = WIDTH // HEADS
    with torch.no_grad():
        if arch == "mpt_qk":
            for block in model.transformer.blocks:
                block.attn.Wqkv.weight[:WIDTH].zero_()  # rows: q, k, v
            return model
        for block in model.transformer.h:
            fused = block.self_attention.query_key_value  # outputs per head: (q, k, v) × d
            fused.weight.view(HEADS, 3, d, -1)[:, 0] = 0.0
            fused.bias.view(HEADS, 3, d)[:, 0] = 0.0
    return model


def _attention_output(model: torch.nn.Module, layer: int) -> torch.nn.Module:
    """The projection a layer's attention output goes through (its input: [B, n, H·d])."""
    block = position_family_of(model).blocks(model)[layer]
    attention = getattr(block, position_family_of(model).attention)
    return attention.out_proj if hasattr(attention, "out_proj") else attention.dense


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


@pytest.mark.parametrize("arch", ARCHS)
def test_a_model_whose_logits_are_its_bias_alone_is_unchanged_by_its_fit(arch):
    """The bias is the whole of the logits and exactly additive: ``additive`` and
    ``distance`` (a[i−j] + b[i] holds the bias) leave the model as it is; ``key`` drops
    the bias's trend, and each head then attends uniformly (on MPT, the mask read as MPT
    means it: were True read as attended, every row would attend its future)."""
    model, ids = _bias_only(arch), _ids(1, N)
    plain = _run(model, ids).logits
    for form in ("additive", "distance"):
        replaced = _run(model, ids, form=LogitForm(form)).logits
        assert (replaced - plain).abs().max() < 1e-5 * plain.abs().max(), form
    rows = _run(model, ids, form=LogitForm("key")).attentions[0][0]  # [H, n, n]
    uniform = _causal_rows(torch.zeros(HEADS, N, N))
    torch.testing.assert_close(rows.double(), uniform, atol=1e-5, rtol=0)
    assert (_run(model, ids).attentions[0][0] - rows).abs().max() > 0.1  # the bias's recency


@pytest.mark.parametrize("arch", ARCHS)
def test_additive_is_the_softmax_of_the_fit_of_the_captured_full_logits(arch):
    """Independently: the layer's full logits captured on a plain forward, fitted by the
    decomposition's fit (float64), softmaxed over the causal entries, are the rows the
    model computes under ``logits=additive``; the fit of the full logits is the fit of q·k
    plus the bias (the bias is exactly additive)."""
    model, ids = build_model(arch), _ids(1, N)
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


@pytest.mark.parametrize("arch", ARCHS)
def test_layers_and_heads_restrict_it_and_the_rest_is_plain_bit_for_bit(arch):
    model, ids = build_model(arch), _ids(1, 32, seed=1)
    into_dense: list[torch.Tensor] = []
    dense = _attention_output(model, 1)
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


@pytest.mark.parametrize("arch", ARCHS)
@pytest.mark.parametrize("form", ["additive", "shuffled"])
def test_a_right_padded_batch_without_a_mask_fits_each_row_as_alone(arch, form):
    """HFLM's call: right-padded rows, no mask; the plan's ``lengths`` say where each row
    ends, and padding enters no fit. A mask that agrees gives the same rows, and alone
    gives each row's length (MPT's bias differs from the row's alone by a per-row
    constant only)."""
    model, ids = build_model(arch), _ids(2, 40)
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
    unplanned = _run(model, ids, mask, form=LogitForm(form), keys=keys).logits  # m: the mask's
    torch.testing.assert_close(unplanned[1, :29], alone[0], atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch", ARCHS)
def test_foreign_with_the_sequence_itself_as_donor_is_the_fit(arch):
    """The donor's distance terms come from the same wrapped bias (the full logits of a
    plain forward: in layer 0 they are the replaced layer's own)."""
    model, ids = build_model(arch), _ids(1, N)
    donor = LogitDonor(distance_terms(model, ids[0].tolist()), "itself")
    assert set(donor.a) == {0, 1} and donor.a[0].shape == (HEADS, N)
    own = _run(model, ids, form=LogitForm("additive"), layers=(0,)).logits
    foreign = _run(model, ids, form=LogitForm("foreign"), donor=donor, layers=(0,)).logits
    assert (own - _run(model, ids).logits).abs().max() > 1e-2
    torch.testing.assert_close(foreign, own, atol=1e-5, rtol=0)


@pytest.mark.parametrize("arch", ARCHS)
def test_a_forward_after_a_kv_cache_is_refused(arch):
    model, ids = build_model(arch), _ids(1, 12)
    with torch.no_grad(), logits_replaced(model, LogitReplacement(LogitForm("additive"))):
        first = model(ids[:, :10], use_cache=True)
        with pytest.raises(RuntimeError, match=r"whole forwards only|without a KV cache"):
            model(ids[:, 10:], cache=first.past_key_values, use_cache=True)


@pytest.mark.parametrize(
    ("arch", "where"),
    [("bloom_qk", r"alibi\.baddbmm\(q, kᵀ\)"), ("mpt_qk", r"scores \+ position_bias")],
)
def test_an_attention_that_computes_no_logits_through_its_bias_is_refused(monkeypatch, arch, where):
    """Were the attention to stop calling ``alibi.baddbmm`` (BLOOM) or adding its
    ``position_bias`` (MPT), the replacement would silently do nothing: refused instead."""
    monkeypatch.setattr(alibi_bias._WrappedBias, "baddbmm", torch.Tensor.baddbmm)
    monkeypatch.setattr(alibi_rows.RowBias, "__radd__", torch.Tensor.__radd__)
    model, ids = build_model(arch), _ids(1, 8)
    with pytest.raises(RuntimeError, match=f"did not compute its logits as {where}"):
        _run(model, ids, form=LogitForm("additive"))


def test_mpt_positions_moved_in_the_same_layer_reach_the_fitted_logits():
    """With hf-posgen's positions moved beside ``logits=`` the fitted logits are MPT's
    scores plus the moved bias (the positions' wrapper's addition): on the bias-only MPT
    the moved bias, a key term m_h·π(j), is exactly additive, so ``additive`` leaves the
    moved model as it is."""
    model, ids = _bias_only("mpt_qk"), _ids(1, N)
    pos = torch.randperm(N, generator=torch.Generator().manual_seed(2))
    family, source = position_family_of(model), full_forward_keys(pos[None])
    with torch.no_grad():
        plain = model(ids).logits
        with alibi_positions(model, family, source):
            moved = model(ids).logits
            with logits_replaced(model, LogitReplacement(LogitForm("additive"))):
                both = model(ids).logits
    assert (moved - plain).abs().max() > 1e-2
    assert (both - moved).abs().max() < 1e-5 * moved.abs().max()


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (lambda mask: ~mask, "leaves a query's future keys unmasked"),
        (lambda mask: mask.float(), r"was handed the mask torch\.float32 \(1, 1, 12, 12\)"),
    ],
)
def test_a_mask_not_of_mpts_form_is_refused(change, message):
    """Read as RoPE models' boolean masks (True where attended), MPT's mask would fit each
    row's future: a mask that is not MPT's (boolean, True where masked) is refused."""
    model, ids = build_model("mpt_qk"), _ids(1, 12)

    def hand(module, args, kwargs):
        return args, {**kwargs, "attention_mask": change(kwargs["attention_mask"])}

    handle = model.transformer.blocks[0].attn.register_forward_pre_hook(hand, with_kwargs=True)
    try:
        with pytest.raises(RuntimeError, match=message) as refused:
            _run(model, ids, form=LogitForm("additive"))
    finally:
        handle.remove()
    assert "\n" not in str(refused.value)
