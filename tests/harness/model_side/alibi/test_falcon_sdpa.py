"""Falcon-ALiBi's logits at its sdpa call (model_side/alibi/falcon_sdpa.py): the captured logits
against the model's own attention output (padding left and right), the bias read from the
mask against the model's own ``build_alibi_tensor``, ``logits=`` (planted truth, the fit
of the captured logits, ``layers=``/``heads=`` exactness, right-padded rows), and the
refusals (eager attention, a KV cache). Tiny random Falcon-ALiBi models on CPU, seconds."""

from __future__ import annotations

import pytest
import torch
from transformers.models.falcon import modeling_falcon

from posgen.harness.additive_fit.logit_fit import FitOptions, LayoutCache, fit_heads, fitted_map
from posgen.harness.model_side.alibi import falcon_sdpa
from posgen.harness.model_side.alibi.bias import alibi_bias_calls
from posgen.harness.model_side.alibi.capture import alibi_capture_forward
from posgen.harness.model_side.logits.forms import LogitForm
from posgen.harness.model_side.logits.replacement import LogitReplacement, logits_replaced
from tiny_models import build_model

N = 40
HEADS, D = 4, 16  # the tiny Falcon's query heads and head size (one key/value head)


def _ids(rows: int, n: int, seed: int = 0) -> torch.Tensor:
    return torch.randint(3, 384, (rows, n), generator=torch.Generator().manual_seed(seed))


def _zero_queries(model) -> None:
    """q = 0 in every layer: each head's logits are its bias alone (multi-query Falcon's
    fused projection: the H query heads first, then one key and one value head)."""
    with torch.no_grad():
        for block in model.transformer.h:
            fused = block.self_attention.query_key_value
            assert fused.bias is None
            fused.weight[: HEADS * D] = 0.0


def _run(model, ids, mask=None, layer=0, **replace):
    """(the model's output logits, ``layer``'s attention output [B, n, H, d] and value
    [B, n, d]), plain or under ``logits=`` (``replace``: LogitReplacement's fields)."""
    seen = {}
    attention = model.transformer.h[layer].self_attention
    hooks = [
        attention.dense.register_forward_pre_hook(lambda m, a: seen.update(out=a[0].clone())),
        attention.query_key_value.register_forward_hook(
            lambda m, a, o: seen.update(value=o.view(*o.shape[:2], HEADS + 2, D)[:, :, -1].clone())
        ),
    ]
    try:
        with torch.no_grad():
            if not replace:
                logits = model(ids, attention_mask=mask).logits
            else:
                with logits_replaced(model, LogitReplacement(**replace)):
                    logits = model(ids, attention_mask=mask).logits
    finally:
        for hook in hooks:
            hook.remove()
    b, n = ids.shape
    return logits, seen["out"].view(b, n, HEADS, D), seen["value"]


def _padding(kind: str) -> torch.Tensor:
    mask = torch.ones(2, N, dtype=torch.long)
    if kind == "left":
        mask[1, :11] = 0
    elif kind == "right":
        mask[1, 29:] = 0
    return mask


@pytest.mark.parametrize("padding", ["none", "left", "right"])
def test_the_captured_logits_are_the_models_own_attention(padding):
    """softmax of the captured W over the entries the model attends, times the values, is
    the attention output Falcon computes; the bias is the model's own, √d-scaled; and the
    capture leaves the output bit for bit."""
    model, ids, mask = build_model("falcon_alibi"), _ids(2, N), _padding(padding)
    got = {}

    def on_call(layer, attention, kwargs):
        return lambda *given: got.setdefault(layer, given) and None

    plain, out, value = _run(model, ids, mask)
    with alibi_bias_calls(model, on_call):
        captured, _, _ = _run(model, ids, mask)
    assert torch.equal(plain, captured) and set(got) == {0, 1}
    bias, w = (x.view(2, HEADS, *x.shape[1:]) for x in got[0][:2])  # [B, H, 1, n], [B, H, n, n]
    alibi = modeling_falcon.build_alibi_tensor(mask, HEADS, torch.float32) / D**0.5
    valid = mask.bool()
    torch.testing.assert_close(
        bias[valid[:, None, None, :].expand_as(bias)],
        alibi.view(2, HEADS, 1, N)[valid[:, None, None, :].expand_as(bias)],
        atol=0,
        rtol=0,
    )
    causal = torch.ones(N, N, dtype=torch.bool).tril()
    attended = causal & valid[:, None, None, :]  # [B, 1, n, n]
    rows = torch.softmax(w.double().masked_fill(~attended, -torch.inf), -1)
    want = torch.einsum("bhij,bjd->bihd", rows, value.double())
    real = attended.any(-1)[:, 0]  # query rows that attend some key [B, n]
    torch.testing.assert_close(out.double()[real], want[real], atol=1e-5, rtol=0)


def test_eager_falcon_is_refused_in_one_line():
    model = build_model("falcon_alibi", attention="eager")
    for block in (
        lambda: alibi_capture_forward(model, list(range(3, 12)), lambda cap: None),
        lambda: logits_replaced(model, LogitReplacement(LogitForm("additive"))).__enter__(),
    ):
        with pytest.raises(ValueError, match="load it with sdpa, the default") as refused:
            block()
        assert "\n" not in str(refused.value)


def test_a_forward_with_a_kv_cache_is_refused():
    model, ids = build_model("falcon_alibi"), _ids(1, 12)
    with torch.no_grad():
        first = model(ids[:, :10], use_cache=True)
        with (
            pytest.raises(RuntimeError, match="whole forwards only"),
            logits_replaced(model, LogitReplacement(LogitForm("additive"))),
        ):
            model(ids[:, 10:], cache=first.past_key_values, use_cache=True)


def test_a_falcon_whose_logits_are_its_bias_alone_is_unchanged_by_its_fit():
    """q = 0: the bias is the whole of the logits and exactly additive: ``additive`` and
    ``distance`` leave the model as it is; ``key`` drops the bias's trend, and each head
    then attends uniformly (its output is the running mean of the values)."""
    model, ids = build_model("falcon_alibi"), _ids(1, N)
    _zero_queries(model)
    plain, own, value = _run(model, ids)
    for form in ("additive", "distance"):
        replaced = _run(model, ids, form=LogitForm(form))[0]
        assert (replaced - plain).abs().max() < 1e-5 * plain.abs().max(), form
    out = _run(model, ids, form=LogitForm("key"))[1]
    mean = value.double().cumsum(1) / torch.arange(1, N + 1, dtype=torch.float64)[:, None]
    torch.testing.assert_close(out.double(), mean[:, :, None].expand_as(out), atol=1e-5, rtol=0)
    assert (own.double() - mean[:, :, None]).abs().max() > 1e-2  # the bias's recency


def test_additive_is_the_softmax_of_the_fit_of_the_captured_full_logits():
    """Independently: layer 0's full logits captured on a plain forward, fitted (float64),
    softmaxed over the causal entries and applied to the values are the attention output
    Falcon computes under ``logits=additive``."""
    model, ids = build_model("falcon_alibi"), _ids(1, N)
    caps = {}
    alibi_capture_forward(model, ids[0].tolist(), lambda cap: caps.setdefault(cap.layer, cap))
    layout = LayoutCache().causal(N, FitOptions())
    full = caps[0].logits[0].double()  # [H, n, n], bias included
    fits = fit_heads(full, layout)
    fitted = torch.stack([fitted_map(fits, h, layout) for h in range(HEADS)])
    rows = torch.softmax(fitted.masked_fill(~layout.mask, -torch.inf), -1)  # [H, n, n]
    _, out, value = _run(model, ids, form=LogitForm("additive"))
    want = torch.einsum("hij,jd->ihd", rows, value[0].double())
    torch.testing.assert_close(out[0].double(), want, atol=2e-6, rtol=0)
    plain = _run(model, ids)[1]
    assert (plain - out).abs().max() > 1e-3  # the fit moves the rows


def test_layers_and_heads_restrict_it_and_the_rest_is_plain_bit_for_bit():
    model, ids = build_model("falcon_alibi"), _ids(1, 32, seed=1)
    _, before0, _ = _run(model, ids, layer=0)
    _, after0, _ = _run(model, ids, layer=0, form=LogitForm("key"), layers=(1,), heads=(2,))
    assert torch.equal(before0, after0)  # layer 0 is not replaced
    _, before, _ = _run(model, ids, layer=1)
    _, after, _ = _run(model, ids, layer=1, form=LogitForm("key"), layers=(1,), heads=(2,))
    others = [0, 1, 3]
    assert torch.equal(before[:, :, others], after[:, :, others])
    assert not torch.allclose(before[:, :, 2], after[:, :, 2])


@pytest.mark.parametrize("form", ["additive", "shuffled"])
def test_a_right_padded_batch_fits_each_row_as_alone(form):
    """HFLM's call: right-padded rows, no mask; the plan's ``lengths`` say where each row
    ends, and padding enters no fit; a mask that agrees gives the same rows."""
    model, ids = build_model("falcon_alibi"), _ids(2, N)
    ids[1, 29:] = 0
    keys = (b"a", b"b")
    both = _run(model, ids, form=LogitForm(form), keys=keys, lengths=(N, 29))[0]
    alone = _run(model, ids[1:, :29], form=LogitForm(form), keys=keys[1:])[0]
    torch.testing.assert_close(both[1, :29], alone[0], atol=1e-5, rtol=0)
    guessed = _run(model, ids, form=LogitForm(form), keys=keys, lengths=(N, N))[0]
    assert (guessed[1, :29] - alone[0]).abs().max() > 1e-3  # padding in the fit
    mask = _padding("right")
    masked = _run(model, ids, mask, form=LogitForm(form), keys=keys, lengths=(N, 29))[0]
    torch.testing.assert_close(masked[1, :29], alone[0], atol=1e-5, rtol=0)


def test_logits_that_are_not_what_sdpa_forms_are_refused(monkeypatch):
    """The check at every call: a bias read twice as large gives logits whose softmax is
    not sdpa's output."""
    model = build_model("falcon_alibi")
    read = falcon_sdpa.mask_bias
    monkeypatch.setattr(falcon_sdpa, "mask_bias", lambda mask: (2 * read(mask)[0], read(mask)[1]))
    with pytest.raises(RuntimeError, match=r"from softmax\(q·kᵀ·s \+ mask\)·v") as refused:
        alibi_capture_forward(model, _ids(1, N)[0].tolist(), lambda cap: None)
    assert "\n" not in str(refused.value)


def test_hf_posgen_refuses_logits_on_an_eager_falcon_when_it_loads(tiny_model_dir):
    """Through lm-eval's model arguments: ``logits=`` on a Falcon-ALiBi loaded with eager
    attention is refused when the model is built, before any request; ``positions=``
    alone runs on it (its hooks take eager attention too)."""
    from posgen.harness.hf_posgen.model import HFPosgenLM
    from posgen.perturbations.base import PerturbationError

    path = str(tiny_model_dir("falcon_alibi"))
    eager = {"pretrained": path, "device": "cpu", "attn_implementation": "eager"}
    with pytest.raises(PerturbationError, match=r"logits=additive: .*load it with sdpa") as no:
        HFPosgenLM(**eager, logits="additive")
    assert "\n" not in str(no.value)
    HFPosgenLM(**eager, positions="swap:0.1")
