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

    compat.install_task_manager(Marker)
    assert lm_eval.tasks.TaskManager is Marker
    assert lm_eval.tasks.manager.TaskManager is Marker
    assert lm_eval.evaluator.TaskManager is Marker


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


def test_transformers_configs_still_carry_attn_implementation():
    from transformers import LlamaConfig

    assert "_attn_implementation" in dir(LlamaConfig())
