"""posgen.compat: every lm-eval / transformers internal resolves in the installed versions,
each patch restores the original, and a moved internal is one clear error."""

from __future__ import annotations

import pytest

from posgen import compat


def test_every_listed_internal_resolves_in_the_installed_libraries():
    assert compat.check() == []


@pytest.mark.parametrize(
    "path", [*compat.LM_EVAL_INTERNALS, *compat.TRANSFORMERS_INTERNALS, *compat.TORCH_INTERNALS]
)
def test_each_internal_resolves(path):
    assert compat.internal(path) is not None


def test_a_moved_internal_names_itself_and_the_tested_version():
    with pytest.raises(
        compat.CompatError, match=r"lm_eval.tasks:NoSuch.*tested with lm_eval 0\.4\.13"
    ):
        compat.internal("lm_eval.tasks:NoSuch")
    with pytest.raises(compat.CompatError, match=r"transformers 5\.x"):
        compat.internal("transformers.no_such_module:x")
    with pytest.raises(compat.CompatError, match=r"torch 2\.13"):
        compat.internal("torch:ops.aten._posgen_no_such_op")


def test_the_cpu_flash_kernel_returns_the_log_sum_exp_of_its_masked_scores():
    import torch

    gen = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(1, 2, 5, 8, generator=gen) for _ in range(3))
    mask = torch.zeros(1, 1, 5, 5).masked_fill(torch.ones(5, 5).triu(1).bool(), float("-inf"))
    out, lse = compat.internal(next(iter(compat.TORCH_INTERNALS)))(
        q, k, v, attn_mask=mask, scale=0.3
    )
    scores = q @ k.transpose(-1, -2) * 0.3 + mask
    torch.testing.assert_close(lse, torch.logsumexp(scores, -1))
    torch.testing.assert_close(out, torch.softmax(scores, -1) @ v)


def test_patched_restores_the_original_even_on_error():
    import lm_eval.models.huggingface as hf

    original = hf.pad_and_concat
    with (
        pytest.raises(ValueError),
        compat.patched(
            "lm_eval.models.huggingface:pad_and_concat", lambda orig: lambda *a: orig(*a)
        ) as repl,
    ):
        assert hf.pad_and_concat is repl
        raise ValueError
    assert hf.pad_and_concat is original


def test_install_task_manager_reaches_every_place_lm_eval_imports_it(monkeypatch):
    import lm_eval.evaluator
    import lm_eval.tasks
    import lm_eval.tasks.manager

    for module in (lm_eval.tasks, lm_eval.tasks.manager, lm_eval.evaluator):
        monkeypatch.setattr(module, "TaskManager", module.TaskManager)

    class Marker:
        pass

    original = lm_eval.tasks.TaskManager
    restore = compat.install_task_manager(Marker)
    assert lm_eval.tasks.TaskManager is Marker
    assert lm_eval.tasks.manager.TaskManager is Marker
    assert lm_eval.evaluator.TaskManager is Marker
    restore()
    for module in (lm_eval.tasks, lm_eval.tasks.manager, lm_eval.evaluator):
        assert module.TaskManager is original
    with compat.task_manager_installed(Marker):
        assert lm_eval.evaluator.TaskManager is Marker
    assert lm_eval.evaluator.TaskManager is original


def test_replace_task_manager_takes_only_a_class_the_replacement_derives_from():
    import types

    from lm_eval.tasks.manager import TaskManager

    class Posgen(TaskManager):
        pass

    home = types.SimpleNamespace(TaskManager=TaskManager)
    restore = compat.replace_task_manager(home, Posgen)
    assert home.TaskManager is Posgen
    restore()
    assert home.TaskManager is TaskManager
    other = types.SimpleNamespace(TaskManager=dict)
    compat.replace_task_manager(other, Posgen)()
    assert other.TaskManager is dict


def test_every_hflm_method_hf_posgen_overrides_is_listed_with_its_parameters():
    from lm_eval.api.model import LM
    from lm_eval.models.huggingface import HFLM

    from posgen.harness.hf_posgen.model import HFPosgenLM

    overridden = {
        name
        for name, value in vars(HFPosgenLM).items()
        if callable(value) and not name.startswith("__") and hasattr(HFLM, name)
    }
    listed = {p.rsplit(".", 1)[1] for p in compat.LM_EVAL_OVERRIDES}
    assert overridden <= listed, f"not in compat.LM_EVAL_OVERRIDES: {overridden - listed}"
    for path in compat.LM_EVAL_OVERRIDES:
        owner = LM if ":LM." in path else HFLM
        assert hasattr(owner, path.rsplit(".", 1)[1])


def test_check_reports_an_overridden_method_whose_parameters_changed(monkeypatch):
    path = "lm_eval.models.huggingface:HFLM._model_call"
    monkeypatch.setitem(compat.LM_EVAL_OVERRIDES, path, ("self", "inps"))
    assert any(m.startswith(path) and "parameters" in m for m in compat.check())


def test_the_response_cache_namespace_is_undone():
    class Db(dict):
        pass

    db = Db()
    compat.namespace_response_cache(db, "swap:0.05@1")
    db["k"] = 1
    assert "k" in db and dict.__contains__(db, "posgen:swap:0.05@1:k")
    compat.plain_response_cache(db)
    assert type(db) is Db and "k" not in db and "posgen:swap:0.05@1:k" in db


def test_env_info_patch_is_restored():
    import lm_eval.evaluator

    from posgen.harness.run.cells import _env_info_once

    before = lm_eval.evaluator.add_env_info, lm_eval.evaluator.get_git_commit_hash
    with _env_info_once():
        assert lm_eval.evaluator.add_env_info is not before[0]
    assert (lm_eval.evaluator.add_env_info, lm_eval.evaluator.get_git_commit_hash) == before


def test_attn_implementation_reads_the_config_and_fails_clearly():
    class Config:
        _attn_implementation = "sdpa"

    class Model:
        config = Config()

    assert compat.attn_implementation(Model()) == "sdpa"
    with pytest.raises(compat.CompatError, match="_attn_implementation"):
        compat.attn_implementation(type("M", (), {"config": object()})())


class _SwitchingModel:
    """Takes the implementations in ``accepts`` and ignores any other."""

    def __init__(self, accepts: set[str]) -> None:
        self.config = type("Config", (), {"_attn_implementation": "sdpa"})()
        self.accepts = accepts

    def set_attn_implementation(self, name: str) -> None:
        if name in self.accepts:
            self.config._attn_implementation = name


def test_attention_implementation_is_restored_even_on_error():
    model = _SwitchingModel({"sdpa", "mine"})
    with compat.attention_implementation(model, "mine") as original:
        assert (original, compat.attn_implementation(model)) == ("sdpa", "mine")
    assert compat.attn_implementation(model) == "sdpa"
    with pytest.raises(KeyError), compat.attention_implementation(model, "mine"):
        raise KeyError("inside")
    assert compat.attn_implementation(model) == "sdpa"


def test_a_model_that_ignores_a_registered_implementation_is_refused():
    model = _SwitchingModel({"sdpa"})
    refused = pytest.raises(compat.CompatError, match="does not accept a registered attention")
    with refused, compat.attention_implementation(model, "mine"):
        raise AssertionError("the block must not run")
    assert compat.attn_implementation(model) == "sdpa"


def test_transformers_configs_still_carry_attn_implementation():
    from transformers import LlamaConfig

    assert "_attn_implementation" in dir(LlamaConfig())


def test_a_rolling_window_runs_as_its_input_tokens():
    """hf-posgen traces a rolling window to its document by the window's input tokens
    (``lm_eval.utils:get_rolling_token_windows``); HFLM runs the window made disjoint,
    ``context + continuation[:-1]``, which must be that input."""
    import lm_eval.utils

    cut = compat.internal("lm_eval.utils:get_rolling_token_windows")
    for length, max_len in ((1, 8), (7, 8), (8, 8), (30, 8), (100, 17)):
        windows = list(cut(list(range(100, 100 + length)), 1, max_len, 1))
        assert windows
        for window in windows:
            context, continuation = lm_eval.utils.make_disjoint_window(window)
            assert context + continuation[:-1] == window[0]


def test_window_tracing_restores_the_cutter_and_refuses_a_mismatch():
    import lm_eval.utils
    from lm_eval.api.instance import Instance

    from posgen.harness.hf_posgen.batch_rows import recording_window_docs

    original = lm_eval.utils.get_rolling_token_windows
    reqs = [Instance("loglikelihood_rolling", {}, ("a",), 0, ("t", 7, 1))]
    with recording_window_docs(reqs) as windows:
        list(lm_eval.utils.get_rolling_token_windows([5, 6], 1, 8, 1))
    assert windows == {(1, 5): frozenset({("t", 7)})}
    assert lm_eval.utils.get_rolling_token_windows is original
    twice = pytest.raises(RuntimeError, match="2 rolling-window cuts for 1 requests")
    with twice, recording_window_docs(reqs):
        for _ in range(2):
            list(lm_eval.utils.get_rolling_token_windows([5, 6], 1, 8, 1))
    assert lm_eval.utils.get_rolling_token_windows is original


def test_using_attention_registers_once_restores_and_sees_through_wrappers():
    from tiny_models import build_model

    model = build_model("llama")
    calls = []

    def make():
        calls.append(1)

        def forward(module, *args, **kwargs):
            from transformers.integrations.sdpa_attention import sdpa_attention_forward

            return sdpa_attention_forward(module, *args, **kwargs)

        return forward

    own = compat.attn_implementation(model)
    for _ in range(2):
        with compat.using_attention(model, "posgen_test_wrap", make, mask=own, wraps=own) as o:
            assert o == own and compat.attn_implementation(model) == "posgen_test_wrap"
            assert compat.base_implementation(model) == own
    assert calls == [1] and compat.attn_implementation(model) == own


def test_an_attention_function_without_a_mask_function_is_refused():
    with pytest.raises(compat.CompatError, match="no mask function for 'nosuch'"):
        compat.register_attention("posgen_test_nomask", lambda: None, mask="nosuch")


def test_patched_refuses_what_compat_does_not_list():
    import lm_eval.utils

    original = lm_eval.utils.make_disjoint_window
    with (
        pytest.raises(compat.CompatError, match=r"not listed in posgen\.compat"),
        compat.patched("lm_eval.utils:make_disjoint_window", lambda orig: None),
    ):
        raise AssertionError("the block must not run")
    assert lm_eval.utils.make_disjoint_window is original


def test_every_model_family_has_its_rotary_function_listed_in_its_modeling_file():
    import transformers
    from transformers.models.auto.modeling_auto import MODEL_MAPPING_NAMES

    from posgen.harness.model_side.family import families

    by_name = {f.name: f for f in families("rotary")}
    assert set(by_name) == set(compat.ROTARY_FUNCTIONS)
    for name, family in by_name.items():
        module, _, function = compat.ROTARY_FUNCTIONS[name].partition(":")
        assert function == family.apply_rotary
        for model_type in family.model_types:
            assert getattr(transformers, MODEL_MAPPING_NAMES[model_type]).__module__ == module


def test_check_reports_a_rotary_function_whose_parameters_changed(monkeypatch):
    moved = "transformers.models.llama.modeling_llama:rotate_half"  # (x), not (q, k, cos, sin)
    monkeypatch.setitem(compat.ROTARY_FUNCTIONS, "llama", moved)
    assert [m for m in compat.check() if m.startswith(moved)] == [
        f"{moved}: parameters start ('x',), not ('q', 'k', 'cos', 'sin')"
    ]


def test_patched_rotary_wraps_restores_and_refuses_another_signature():
    import transformers.models.llama.modeling_llama as llama

    original = llama.apply_rotary_pos_emb
    with compat.patched_rotary(llama.__name__, "apply_rotary_pos_emb", lambda o: "wrapped"):
        assert llama.apply_rotary_pos_emb == "wrapped"
    assert llama.apply_rotary_pos_emb is original
    with (
        pytest.raises(compat.CompatError, match=r"rotate_half: parameters start \('x',\)"),
        compat.patched_rotary(llama.__name__, "rotate_half", lambda o: None),
    ):
        raise AssertionError("the block must not run")


def test_forward_replaced_runs_hooks_and_puts_an_instance_forward_back():
    import torch

    layer, x, seen = torch.nn.Identity(), torch.ones(2), []
    layer.register_forward_hook(lambda module, args, output: seen.append(output))
    with compat.forward_replaced(layer, lambda *args: "recorded"):
        assert layer(x) == "recorded"
    assert layer(x) is x and "forward" not in vars(layer) and seen == ["recorded", x]
    own = lambda *args: "accelerate's"  # noqa: E731  (an instance-level forward)
    layer.forward = own
    with pytest.raises(KeyError), compat.forward_replaced(layer, lambda *args: None):
        raise KeyError("inside")
    assert vars(layer)["forward"] is own


def test_the_hflm_attributes_hf_posgen_sets_exist_and_are_read(tiny_model_dir):
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=str(tiny_model_dir("llama")), device="cpu", batch_size=1)
    assert set(compat.LM_EVAL_ATTRIBUTES) == {
        "HFLM.accelerator",
        "HFLM._rank",
        "HFLM._world_size",
        "HFLM.logits_cache",
        "HFLM._max_length",
    }
    assert lm.logits_cache is True  # HFLM's default, which hf-posgen turns off and back
    assert lm._max_length is None and lm.max_length == 2048  # the tiny Llama's config
    lm._max_length = 7  # where hf-posgen holds it (MPT's max_seq_len)
    assert lm.max_length == 7

    class Accelerator:  # HFLM sets one only when it counts several GPUs
        waited = 0

        def wait_for_everyone(self) -> None:
            self.waited += 1

    lm.accelerator, lm._rank, lm._world_size = Accelerator(), 1, 2
    lm.barrier()
    assert (lm.rank, lm.world_size, lm.accelerator.waited) == (1, 2, 1)


def test_wrapped_method_changes_one_object_is_undone_and_must_be_listed():
    from lm_eval.api.samplers import ContextSampler, FirstNSampler

    sampler, other = FirstNSampler([{"a": 1}], rnd=None), FirstNSampler([{"a": 2}], rnd=None)
    undo = compat.wrapped_method(sampler, "sample", lambda inner: lambda *a, **k: ["wrapped"])
    assert sampler.sample(1) == ["wrapped"] and other.sample(1) == [{"a": 2}]
    undo()
    assert "sample" not in vars(sampler) and sampler.sample(1) == [{"a": 1}]
    assert isinstance(sampler, ContextSampler)
    with pytest.raises(compat.CompatError, match=r"FirstNSampler\.set_rnd is wrapped but not"):
        compat.wrapped_method(sampler, "set_rnd", lambda inner: inner)


def test_check_reports_a_wrapped_method_whose_parameters_changed(monkeypatch):
    path = next(iter(compat.LM_EVAL_WRAPPED))
    monkeypatch.setitem(compat.LM_EVAL_WRAPPED, path, ("self", "n"))
    assert any(m.startswith(path) and "parameters" in m for m in compat.check())
