"""posgen.compat and a family's ``apply_rotary_pos_emb``: the plain function (transformers
5.24) and the ``kernels`` wrapper module that carries it (5.25), the check of both, and the
commands refusing a moved internal before their first cell."""

from __future__ import annotations

import sys
import types

import pytest
import torch

from posgen import compat


def _rotate(q, k, cos, sin, unsqueeze_dim=1):
    return q * cos + sin, k * cos - sin


def _wrapper_like_kernels(func):
    """A module built as kernels 0.19's ``_create_func_module`` builds it (its forward holds
    the function in its closure as ``func``), for a run without the kernels package."""

    class Func(torch.nn.Module):
        def forward(self, *args, **kwargs):
            return func(*args, **kwargs)

    Func.kernel_layer_name = "rotary_pos_emb"
    return Func()


def _wrappers() -> list:
    wrappers = [_wrapper_like_kernels(_rotate)]
    try:
        from kernels import use_kernel_forward_from_hub
    except ImportError:  # the pinned transformers 5.24 installs no kernels package
        return wrappers
    return [*wrappers, use_kernel_forward_from_hub("rotary_pos_emb")(_rotate)]


@pytest.mark.parametrize("wrapper", _wrappers(), ids=lambda w: type(w).__module__)
def test_a_kernels_wrapper_carries_the_function_posgen_checks_and_calls(wrapper):
    assert compat.is_kernel_wrapper(wrapper) and not compat.is_kernel_wrapper(_rotate)
    assert compat.rotary_function(wrapper) is _rotate
    assert compat.rotary_function(_rotate) is _rotate
    assert compat.rotary_problem(wrapper) == ""


def test_a_wrapper_of_another_function_or_without_one_is_reported():
    def rotate_half(x):
        return x

    wrapped = _wrapper_like_kernels(rotate_half)
    assert compat.rotary_problem(wrapped) == (
        "the function its kernels wrapper carries: parameters start ('x',), not "
        "('q', 'k', 'cos', 'sin')"
    )

    class Opaque(torch.nn.Module):  # a wrapper whose forward holds no function
        kernel_layer_name = "rotary_pos_emb"

        def forward(self, *args, **kwargs):
            return args

    assert "without the function it should carry" in compat.rotary_problem(Opaque())
    with pytest.raises(compat.CompatError, match="whose function posgen cannot find"):
        compat.rotary_function(Opaque())


def test_patched_rotary_hands_on_the_carried_function_and_puts_the_wrapper_back(monkeypatch):
    module = types.ModuleType("posgen_planted_modeling")
    wrapper = _wrapper_like_kernels(_rotate)
    module.apply_rotary_pos_emb = wrapper
    monkeypatch.setitem(sys.modules, module.__name__, module)
    seen = []
    with compat.patched_rotary(module.__name__, "apply_rotary_pos_emb", seen.append):
        assert module.apply_rotary_pos_emb is None  # what make returned
    assert seen == [_rotate] and module.apply_rotary_pos_emb is wrapper

    def make(original):
        return lambda q, k, cos, sin: ("wrapped", original(q, k, cos, sin))

    with compat.patched_rotary(module.__name__, "apply_rotary_pos_emb", make):
        one = torch.ones(1)
        tag, (q, k) = module.apply_rotary_pos_emb(one, one, one, one)
        assert tag == "wrapped" and float(q) == 2.0 and float(k) == 0.0
    assert module.apply_rotary_pos_emb is wrapper


def test_the_family_rotary_function_is_the_plain_function_in_the_installed_release():
    import inspect

    import transformers.models.llama.modeling_llama as llama

    found = llama.apply_rotary_pos_emb
    plain = compat.rotary_function(found)
    assert inspect.isfunction(plain) and plain.__name__ == "apply_rotary_pos_emb"
    assert plain.__module__ == llama.__name__
    assert compat.is_kernel_wrapper(found) == (found is not plain)


def test_check_can_take_only_some_families_and_require_lists_what_it_found(monkeypatch):
    moved = "transformers.models.llama.modeling_llama:rotate_half"  # (x), not (q, k, cos, sin)
    monkeypatch.setitem(compat.ROTARY_FUNCTIONS, "llama", moved)
    assert any(m.startswith(moved) for m in compat.check(["llama"]))
    assert not any(m.startswith(moved) for m in compat.check(["qwen2", "generic"]))
    compat.require(["qwen2"])
    with pytest.raises(compat.CompatError, match=r"installed libraries .*rotate_half: parameters"):
        compat.require(["llama"])
