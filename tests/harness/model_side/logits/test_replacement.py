"""``logits=``: each layer's logits replaced by their exact additive fit inside the model's
own forward. Planted truth (an exactly additive model; a planted position–content
interaction), batch independence (rows' lengths from the batch plan, or a mask that
agrees), layers=/heads= exactness, the forms and the refusals."""

from __future__ import annotations

import pytest
import torch

from planted_models import block_window, planted_model
from posgen.harness.additive_fit.logit_fit import FitOptions, LayoutCache, fit_heads, fitted_map
from posgen.harness.decomposition.predicted_change import distance_terms
from posgen.harness.model_side.logits.capture import capture_forward
from posgen.harness.model_side.logits.forms import LogitDonor, LogitForm, shuffled_within_rows
from posgen.harness.model_side.logits.replacement import LogitReplacement, logits_replaced
from posgen.harness.model_side.perturbation import ModelPerturbation
from posgen.perturbations.base import PerturbationError
from tiny_models import build_model

N = 48


def _logits(model, ids, **replace) -> torch.Tensor:
    with torch.no_grad():
        if not replace:
            return model(torch.tensor([ids])).logits[0]
        with logits_replaced(model, LogitReplacement(**replace)):
            return model(torch.tensor([ids])).logits[0]


def _captured(model, ids) -> torch.Tensor:
    kept = {}
    capture_forward(model, ids, lambda cap: kept.__setitem__(cap.layer, cap.logits[0].clone()))
    return kept[0]


def test_an_exactly_additive_model_is_unchanged_by_its_fit_to_float_rounding():
    model, ids = planted_model(0.0), block_window(N)
    plain = _logits(model, ids)
    replaced = _logits(model, ids, form=LogitForm("additive"))
    assert (replaced - plain).abs().max() < 1e-5 * plain.abs().max()
    for form in ("distance", "key"):  # each term alone is not the model
        alone = _logits(model, ids, form=LogitForm(form))
        assert (alone - plain).abs().max() > 1e-2 * plain.abs().max()


@pytest.mark.parametrize("strength", [0.3, 1.0])
def test_the_fit_removes_exactly_the_non_additive_part_of_a_planted_interaction(strength):
    """W_λ = A + I (A exactly additive, I the planted interaction). The fit is linear, so
    the replaced logits are A + fit(I): the replacement removes I − fit(I), as planted.
    Seen where it acts: the model's own eager softmax rows (``output_attentions``)."""
    ids = block_window(N)
    w0, planted = _captured(planted_model(0.0), ids), planted_model(strength)
    planted.set_attn_implementation("eager")  # eager returns its softmax rows
    interaction = _captured(planted, ids) - w0
    layout = LayoutCache().causal(N, FitOptions())
    fit_i = torch.stack(
        [fitted_map(fit_heads(interaction.double(), layout), h, layout) for h in range(4)]
    )
    expected = w0.double() + fit_i  # [H, n, n], NaN off the causal entries
    causal = layout.mask
    want = torch.softmax(expected.masked_fill(~causal, -torch.inf), dim=-1)
    with torch.no_grad(), logits_replaced(planted, LogitReplacement(LogitForm("additive"))):
        got = planted(torch.tensor([ids]), output_attentions=True).attentions[0][0]
    removed = (interaction.double() - fit_i)[:, causal]
    assert removed.abs().max() > 1e-3  # something non-additive was planted
    plain = torch.softmax(_captured(planted, ids).double().masked_fill(~causal, -torch.inf), -1)
    assert (plain - want).abs().max() > 1e-3  # and the softmax rows tell them apart
    torch.testing.assert_close(got.double(), want, atol=2e-6, rtol=0)


def test_sdpa_and_eager_models_get_the_same_replacement():
    model, ids = planted_model(0.7), block_window(N)
    sdpa = _logits(model, ids, form=LogitForm("additive"))
    model.set_attn_implementation("eager")
    eager = _logits(model, ids, form=LogitForm("additive"))
    torch.testing.assert_close(sdpa, eager, atol=1e-5, rtol=0)
    assert (sdpa - _logits(model, ids)).abs().max() > 1e-3  # and the fit moved them


def test_a_padded_batch_replaces_each_row_as_alone():
    """The same fit, draws and replacement per row in any batch (to the rounding of the
    attention kernel, which differs between a padded and an unpadded row)."""
    model = build_model("llama")
    ids = torch.randint(3, 300, (2, 40), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 40, dtype=torch.long)
    mask[1, 29:] = 0
    for form in ("additive", "shuffled"):
        with torch.no_grad():
            with logits_replaced(model, LogitReplacement(LogitForm(form), keys=(b"a", b"b"))):
                both = model(ids, attention_mask=mask).logits
            with logits_replaced(model, LogitReplacement(LogitForm(form), keys=(b"b",))):
                alone = model(ids[1:, :29]).logits
        torch.testing.assert_close(both[1, :29], alone[0], atol=1e-5, rtol=0)


def test_a_padded_batch_without_a_mask_takes_each_rows_length_from_lengths():
    """HFLM's call: right-padded rows, no attention mask; ``lengths`` (the batch plan's)
    say where each row ends, and padding enters no fit (sdpa, and eager, whose mask then
    covers the whole padded width)."""
    model = build_model("llama")
    ids = torch.randint(3, 300, (2, 40), generator=torch.Generator().manual_seed(0))
    ids[1, 29:] = 0
    for impl in ("sdpa", "eager"):
        model.set_attn_implementation(impl)
        for form in ("additive", "shuffled"):
            both = _logits_of(model, ids, LogitForm(form), keys=(b"a", b"b"), lengths=(40, 29))
            alone = _logits_of(model, ids[1:, :29], LogitForm(form), keys=(b"b",))
            torch.testing.assert_close(both[1, :29], alone[0], atol=1e-5, rtol=0)
            guessed = _logits_of(model, ids, LogitForm(form), keys=(b"a", b"b"), lengths=(40, 40))
            assert (guessed[1, :29] - alone[0]).abs().max() > 1e-3  # padding in the fit


def test_lengths_and_a_mask_that_disagree_are_refused():
    model = build_model("llama")
    ids = torch.randint(3, 300, (2, 40), generator=torch.Generator().manual_seed(0))
    mask = torch.ones(2, 40, dtype=torch.long)
    mask[1, 29:] = 0
    form = LogitForm("additive")
    agreed = _logits_of(model, ids, form, lengths=(40, 29), attention_mask=mask)
    unsaid = _logits_of(model, ids, form, attention_mask=mask)  # the mask alone says 29
    torch.testing.assert_close(agreed, unsaid, atol=0, rtol=0)
    with pytest.raises(RuntimeError, match="by its request but the attention mask gives it 29"):
        _logits_of(model, ids, form, lengths=(40, 31), attention_mask=mask)
    with pytest.raises(RuntimeError, match="cannot tell the real tokens"):
        _logits_of(model, ids, form)  # no mask, no lengths: padding or not?


def _logits_of(model, ids, form, attention_mask=None, **replace) -> torch.Tensor:
    with torch.no_grad(), logits_replaced(model, LogitReplacement(form, **replace)):
        return model(ids, attention_mask=attention_mask).logits


def test_layers_below_the_first_replaced_one_and_other_heads_are_plain_bit_for_bit():
    model = build_model("qwen2")
    ids = torch.randint(3, 300, (1, 32), generator=torch.Generator().manual_seed(1))
    inputs = {}

    def keep(name):
        def hook(module, args):
            inputs[name] = args[0].clone()

        return hook

    attn = [layer.self_attn for layer in model.model.layers]
    hooks = [a.o_proj.register_forward_pre_hook(keep(f"o{k}")) for k, a in enumerate(attn)]
    with torch.no_grad():
        plain = model(ids, output_hidden_states=True).hidden_states
        plain_o = dict(inputs)
        with logits_replaced(model, LogitReplacement(LogitForm("key"), layers=(1,), heads=(2,))):
            moved = model(ids, output_hidden_states=True).hidden_states
    for h in hooks:
        h.remove()
    assert torch.equal(plain[1], moved[1])  # layer 0 is not replaced
    d = 16  # head_dim of the tiny qwen2
    got, want = inputs["o1"].view(1, 32, 4, d), plain_o["o1"].view(1, 32, 4, d)
    assert torch.equal(got[:, :, [0, 1, 3]], want[:, :, [0, 1, 3]])
    assert not torch.equal(got[:, :, 2], want[:, :, 2])


def test_foreign_with_the_sequence_itself_as_donor_is_the_fit():
    model, ids = planted_model(0.5), block_window(N)
    donor = LogitDonor(distance_terms(model, ids), "itself")
    own = _logits(model, ids, form=LogitForm("additive"))
    foreign = _logits(model, ids, form=LogitForm("foreign"), donor=donor)
    torch.testing.assert_close(foreign, own, atol=1e-5, rtol=0)
    short = LogitDonor(distance_terms(model, ids[:16]), "short")
    with pytest.raises(RuntimeError, match="longer than the donor"):
        _logits(model, ids, form=LogitForm("foreign"), donor=short)


@pytest.mark.parametrize("arch", ["llama", "gemma2"])
def test_the_route_of_the_whole_logits_gives_what_the_logit_change_gives(monkeypatch, arch):
    """Every head, F all the layer attends: the scores are W' itself on a zero query
    (reversed rows, sums from q and k), elsewhere W + δ. Forced down the second route, the
    same outputs (llama: grouped KV heads; gemma2: sliding-window layers, a band F, with its
    soft-capping off), unpadded and in a padded batch."""
    import posgen.harness.model_side.logits.replacement as replacement

    model = build_model(arch)
    for module in model.modules():
        if hasattr(module, "attn_logit_softcapping"):
            module.attn_logit_softcapping = None
    ids = list(range(5, 45))
    batch, mask = torch.tensor([ids, ids[::-1]]), torch.ones(2, 40, dtype=torch.long)
    mask[1, 31:] = 0
    donor = LogitDonor(distance_terms(model, ids), "itself")
    taken = []
    whole = replacement.fit_logits
    monkeypatch.setattr(replacement, "fit_logits", lambda *a: taken.append(1) or whole(*a))

    def run(form: str) -> tuple[torch.Tensor, torch.Tensor]:
        taken.clear()
        with torch.no_grad(), logits_replaced(model, LogitReplacement(form, donor=donor)):
            return model(batch[:1]).logits, model(batch, attention_mask=mask).logits[:, :31]

    for form in map(LogitForm, ("additive", "distance", "key", "foreign")):
        first = run(form)
        assert len(taken) == 2 * len(model.model.layers)  # every layer, both forwards
        with monkeypatch.context() as forced:
            forced.setattr(LogitReplacement, "replaces_whole_logits", lambda *a: False)
            second = run(form)
            assert not taken
        for one, other in zip(first, second, strict=True):
            torch.testing.assert_close(one, other, atol=2e-5, rtol=0)
        assert (first[0] - _logits(model, ids)).abs().max() > 1e-3  # and it replaced


def test_shuffled_permutes_each_rows_residual_among_its_fitted_entries():
    gen = torch.Generator().manual_seed(3)
    fitted = torch.rand(12, 12, generator=gen) < 0.6
    fitted = fitted.tril()
    values = torch.where(fitted, torch.randn(2, 12, 12, generator=gen), 0.0)
    keys = torch.randn(2, 12, 12, generator=gen)
    out = shuffled_within_rows(values, fitted, keys)
    assert torch.equal(out[:, ~fitted], torch.zeros_like(out[:, ~fitted]))
    for p in range(2):
        for i in range(12):
            row = fitted[i]
            assert torch.equal(out[p, i, row].sort().values, values[p, i, row].sort().values)
    assert not torch.equal(out, values)


def test_shuffled_is_seeded_by_seed_layer_and_tokens():
    model = build_model("llama")
    ids = list(range(5, 45))
    a = _logits(model, ids, form=LogitForm("shuffled"), keys=(b"x",), seed=1)
    b = _logits(model, ids, form=LogitForm("shuffled"), keys=(b"x",), seed=1)
    c = _logits(model, ids, form=LogitForm("shuffled"), keys=(b"x",), seed=2)
    assert torch.equal(a, b) and not torch.equal(a, c)


@pytest.mark.parametrize(
    "kwargs, message",
    [
        ({"logits": "aditive"}, "did you mean 'additive'"),
        ({"logits": "additive", "features": "qk_noise:0.5"}, "both replace the attention"),
        (
            {"logits": "key", "positions": "swap:0.1", "layers": "1", "heads": "0"},
            "picks heads for the replacement only",
        ),
        ({"heads": "1", "logits": "key"}, "give layers= too"),
    ],
)
def test_logits_specs_are_refused_before_loading(kwargs, message):
    args = {"positions": None, "features": None, "seed": 0, **kwargs}
    with pytest.raises(PerturbationError, match=message):
        ModelPerturbation.parse(
            args.pop("positions"), args.pop("features"), args.pop("seed"), **args
        )


def test_logits_with_layers_is_a_perturbation_of_its_own():
    p = ModelPerturbation.parse(None, None, 0, layers="3", logits="additive")
    assert p.changes_model and p.to_dict()["logits"] == "additive"
    assert p.cache_namespace() != ModelPerturbation.parse(None, None, 0).cache_namespace()


@pytest.mark.parametrize("form", ["additive", "distance", "key"])
def test_the_reversed_scores_are_a_gather_by_the_distance_masked_past_the_fit(form):
    from posgen.harness.model_side.logits.forms import reversed_form_logits

    gen = torch.Generator().manual_seed(1)
    a, b, c = (torch.randn(3, 12, generator=gen, dtype=torch.float64) for _ in range(3))
    a[:, 9:] = float("nan")  # a band of 9 distances: the rest is not fitted
    for m in (1, 2, 7, 12):
        i = torch.arange(m)
        d = i[:, None] - i[None, :]
        parts = {"additive": "abc", "distance": "ab", "key": "bc"}[form]
        terms = {"a": a[:, d.clamp(min=0)], "b": b[:, :m, None], "c": c[:, None, :m]}
        want = sum(terms[x] for x in parts)
        fitted = (d >= 0) & (d < 9)
        got = reversed_form_logits(LogitForm(form), a, b, c, torch.empty(3, m, m)).flip(1)
        torch.testing.assert_close(got[:, fitted], want[:, fitted].float())
        assert (got[:, ~fitted] <= torch.finfo(torch.float32).min / 2).all()
