"""Every place posgen reaches into lm-eval's, transformers' or torch's internals.

posgen is tested with lm-eval 0.4.13 and transformers 5.x; another lm-eval release is
refused by :func:`require_supported_lm_eval` (posgen uses its private task index and
factory) before any of its internals load. Outside their public APIs it relies on the
names listed here: :data:`LM_EVAL_INTERNALS`, :data:`TRANSFORMERS_INTERNALS`,
:data:`TORCH_INTERNALS` (one private torch op), the methods of lm-eval's ``HFLM`` that
``hf-posgen`` overrides with their parameters (:data:`LM_EVAL_OVERRIDES`), the attributes
it reads or sets (:data:`TRANSFORMERS_ATTRIBUTES`, :data:`LM_EVAL_ATTRIBUTES`), the
methods it wraps on one lm-eval object (:data:`LM_EVAL_WRAPPED`) and each
model family's ``apply_rotary_pos_emb`` (:data:`ROTARY_FUNCTIONS`; a plain function in
transformers 5.24, a ``kernels`` wrapper module carrying it in 5.25:
:mod:`posgen.compat.rotary`). :func:`check` verifies them against the installed
libraries (the test suite runs it, also on the newest releases in range: ``make
test-newest``); :func:`require` raises what it finds, and every command and ``hf-posgen``
call it for their model's family before their first cell. Each accessor raises
:class:`CompatError` with one clear message naming the internal and the tested version
when an upgrade moved it, instead of an ``AttributeError`` deep inside a run.

Every patch of another library's object goes through :mod:`posgen.compat.patches`, each
with its undo: :func:`patched` (a module attribute listed here, within a block),
:func:`wrapped_method` (a listed method of one lm-eval object),
:func:`patched_rotary` (a family's rotary function), :func:`forward_replaced` (a torch
module's ``forward``), the two process-wide changes (lm-eval's ``TaskManager``:
:func:`install_task_manager` and :func:`replace_task_manager` return their restore; the
key namespace of its response cache: :func:`plain_response_cache`). posgen's own
attention functions run through :func:`using_attention` (:mod:`posgen.compat.attention`).

Imports of lm-eval, transformers and torch happen inside the functions: importing this
package is free.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Iterable
from importlib import metadata
from typing import Any

from posgen.compat.rotary import (
    ROTARY_PARAMETERS,
    is_kernel_wrapper,
    rotary_function,
    rotary_problem,
)

LM_EVAL_TESTED = "0.4.13"
TRANSFORMERS_TESTED = "5.x"
TORCH_TESTED = "2.13"

# "module:attribute" -> why posgen needs it
LM_EVAL_INTERNALS: dict[str, str] = {
    "lm_eval.tasks._index:Entry": "PosgenTaskManager adds index entries for perturbed names",
    "lm_eval.tasks._index:Kind": "the kind of an index entry (task, group, tag)",
    "lm_eval.tasks._yaml_loader:load_yaml": (
        "reads a group's YAML to perturb its members, and the configs a task includes"
    ),
    "lm_eval.config.group:GroupConfig": "the keys a perturbed group may inherit",
    "lm_eval.tasks:TaskManager": "replaced by PosgenTaskManager in the lm_eval CLI",
    "lm_eval.tasks.manager:TaskManager": "the same class, where the CLI imports it",
    "lm_eval.evaluator:TaskManager": "the same class, where simple_evaluate imports it",
    "lm_eval.tasks:TaskManager._entry": "PosgenTaskManager resolves unknown names there",
    "lm_eval.tasks.manager:TaskIndex": (
        "PosgenTaskManager reads the index of lm-eval's own task folder from posgen's cache"
    ),
    "lm_eval.tasks._index:TaskIndex.build": "the index of lm-eval's task folders, cached",
    "lm_eval.tasks._factory:TaskFactory": (
        "PosgenTaskManager's factory builds a task declaring the evidence-depth protocol "
        "with the protocol's class"
    ),
    "lm_eval.models.huggingface:pad_and_concat": "hf-posgen records HFLM's padding of a batch",
    "lm_eval.models.huggingface:Collator": "hf-posgen watches HFLM's batcher (a subclass)",
    "lm_eval.models.huggingface:Collator.get_batched": "hf-posgen reads each batch's continuations",
    "lm_eval.utils:get_rolling_token_windows": "hf-posgen traces each window to its document",
    "lm_eval.evaluator:add_env_info": "posgen run collects the environment report once",
    "lm_eval.evaluator:get_git_commit_hash": "posgen run asks git once, quietly",
    "lm_eval.loggers:EvaluationTracker": "posgen run writes each cell's output as lm-eval's CLI",
    "lm_eval.loggers:EvaluationTracker.save_results_aggregated": "results_<date>.json",
    "lm_eval.loggers:EvaluationTracker.save_results_samples": "samples_<task>_<date>.jsonl",
    "lm_eval.api.registry:AGGREGATION_REGISTRY": "an aggregation's name, and its function",
    "lm_eval.api.registry:METRIC_AGGREGATION_REGISTRY": "a metric's default aggregation",
    "lm_eval.api.registry:HIGHER_IS_BETTER_REGISTRY": "a metric's default direction",
    "lm_eval.api.registry:DEFAULT_METRIC_REGISTRY": "the metrics of a task without metric_list",
    "lm_eval._cli.utils:try_parse_json": "posgen run reads --gen-kwargs as lm-eval's CLI",
    "lm_eval._cli.utils:key_val_to_dict": "posgen run reads --gen-kwargs as lm-eval's CLI",
}
TRANSFORMERS_INTERNALS: dict[str, str] = {
    "transformers.modeling_utils:ALL_ATTENTION_FUNCTIONS": (
        "the attention functions qk noise, Λ attention and the capture (its sdpa outputs) "
        "call through to"
    ),
    "transformers.masking_utils:ALL_MASK_ATTENTION_FUNCTIONS": (
        "the mask function each of posgen's attention functions registers beside it"
    ),
}
TORCH_INTERNALS: dict[str, str] = {
    "torch:ops.aten._scaled_dot_product_flash_attention_for_cpu": (
        "Λ attention's local band: the fused CPU kernel with its log-sum-exp"
    ),
}
# methods of lm-eval's HFLM that hf-posgen overrides, private ones included -> the
# parameters posgen's override is written for (check() compares the installed signature)
LM_EVAL_OVERRIDES: dict[str, tuple[str, ...]] = {
    "lm_eval.models.huggingface:HFLM.loglikelihood": ("self", "requests", "disable_tqdm"),
    "lm_eval.models.huggingface:HFLM.loglikelihood_rolling": ("self", "requests", "disable_tqdm"),
    "lm_eval.models.huggingface:HFLM.generate_until": ("self", "requests", "disable_tqdm"),
    "lm_eval.models.huggingface:HFLM._loglikelihood_tokens": (
        "self",
        "requests",
        "disable_tqdm",
        "override_bs",
    ),
    "lm_eval.models.huggingface:HFLM._detect_batch_size": ("self", "requests", "pos"),
    "lm_eval.models.huggingface:HFLM._model_generate": (
        "self",
        "context",
        "max_length",
        "stop",
        "generation_kwargs",
    ),
    "lm_eval.models.huggingface:HFLM.tok_batch_encode": (
        "self",
        "strings",
        "padding_side",
        "left_truncate_len",
        "truncation",
    ),
    "lm_eval.models.huggingface:HFLM._model_call": ("self", "inps", "attn_mask", "labels"),
    "lm_eval.models.huggingface:HFLM.get_model_info": ("self",),
    "lm_eval.models.huggingface:HFLM.chat_template": ("self", "chat_template"),
    "lm_eval.models.huggingface:HFLM.apply_chat_template": (
        "self",
        "chat_history",
        "add_generation_prompt",
    ),
    "lm_eval.api.model:LM.set_cache_hook": ("self", "cache_hook"),
}
# methods of lm-eval objects posgen wraps on one instance (wrapped_method) -> the
# parameters its wrapper is written for (check() compares the installed signature)
LM_EVAL_WRAPPED: dict[str, tuple[str, ...]] = {
    "lm_eval.api.samplers:ContextSampler.sample": ("self", "n", "eval_doc", "df", "kwargs"),
}
# attributes of objects (not importable paths) posgen reads or sets: checked by the tests
TRANSFORMERS_ATTRIBUTES = {
    "PretrainedConfig._attn_implementation": "the attention function a model runs now",
}
LM_EVAL_ATTRIBUTES = {
    "HFLM.accelerator": "read by HFLM.barrier/all_gather; set when HFLM missed the launch",
    "HFLM._rank": "read by HFLM.rank: which documents this process scores",
    "HFLM._world_size": "read by HFLM.world_size: how many processes share the documents",
    "HFLM.logits_cache": "off while one request group needs two forwards (perturbed contexts)",
    "HFLM._max_length": "HFLM's max_length= (read by HFLM.max_length): held to the positions "
    "a model takes in one forward where lm-eval does not read them (MPT's max_seq_len)",
}
# per rotary family of harness/model_side/family.py: the function that rotates its queries and
# keys, which heads= wraps (patched_rotary); check() verifies it takes ROTARY_PARAMETERS
# first, or that the kernels wrapper transformers 5.25 puts there carries such a function
# (posgen.compat.rotary)
ROTARY_FUNCTIONS: dict[str, str] = {
    family: f"transformers.models.{family}.modeling_{family}:apply_rotary_pos_emb"
    for family in ("llama", "qwen2", "qwen3", "mistral", "gemma2", "gemma3", "phi3", "gpt_neox")
}


def attn_implementation(model: Any) -> str:
    """The name of the attention implementation ``model`` runs (``sdpa``, ``eager``, a
    registered name): transformers keeps it in ``config._attn_implementation``."""
    try:
        return model.config._attn_implementation
    except AttributeError:
        raise CompatError(
            f"{type(model).__name__}.config has no _attn_implementation; posgen is tested "
            f"with transformers {TRANSFORMERS_TESTED}"
        ) from None


class CompatError(RuntimeError):
    """An lm-eval or transformers internal that posgen relies on is missing."""


class UnsupportedLmEvalError(RuntimeError):
    """The installed lm-eval is not the release posgen is tested with."""


def require_supported_lm_eval(installed: str | None = None) -> None:
    """Raise :class:`UnsupportedLmEvalError` unless lm-eval ``LM_EVAL_TESTED`` is installed
    (a local or development build of that release, ``0.4.13+local``, is accepted)."""
    if installed is None:
        try:
            installed = metadata.version("lm_eval")
        except metadata.PackageNotFoundError:
            raise UnsupportedLmEvalError(
                f"lm-eval is not installed; posgen needs lm-eval=={LM_EVAL_TESTED}: "
                f"pip install 'lm-eval[hf]=={LM_EVAL_TESTED}'"
            ) from None
    release = installed.split("+")[0]
    if release != LM_EVAL_TESTED:
        raise UnsupportedLmEvalError(
            f"posgen is tested with lm-eval {LM_EVAL_TESTED} only and uses its task "
            f"internals, but lm-eval {installed} is installed: "
            f"pip install 'lm-eval[hf]=={LM_EVAL_TESTED}'"
        )


def _resolve(path: str) -> Any:
    module_name, _, attr_path = path.partition(":")
    obj: Any = importlib.import_module(module_name)
    for attr in attr_path.split("."):
        obj = getattr(obj, attr)
    return obj


def internal(path: str) -> Any:
    """The object at ``"module:attr[.attr]"``, or a :class:`CompatError` that says which
    internal moved and which versions posgen is tested with."""
    try:
        return _resolve(path)
    except (ImportError, AttributeError) as exc:
        lib = path.split(":", 1)[0].split(".", 1)[0]
        tested = {"lm_eval": LM_EVAL_TESTED, "torch": TORCH_TESTED}.get(lib, TRANSFORMERS_TESTED)
        raise CompatError(
            f"{path} is missing in the installed {lib} {_version(lib)} ({exc}); posgen is "
            f"tested with {lib} {tested}: install that version, or update posgen.compat"
        ) from None


def _version(lib: str) -> str:
    try:
        return importlib.metadata.version(lib)
    except importlib.metadata.PackageNotFoundError:
        return "(not installed)"


def check(families: Iterable[str] | None = None) -> list[str]:
    """Every internal that does not resolve in the installed libraries, every overridden
    or wrapped method whose parameters changed, every family's rotary function that does
    not take :data:`ROTARY_PARAMETERS` first (or, as transformers 5.25's kernels wrapper,
    carries no such function), a torch module that does not run an instance's own
    ``forward`` (:func:`forward_replaced`), and the position families' internals
    (:mod:`.position_families`). ``families``: only these families' rotary functions
    (names of :data:`ROTARY_FUNCTIONS`; unlisted names are skipped); None: all.
    Empty: all as posgen expects."""
    import inspect

    missing = []
    paths = (*LM_EVAL_INTERNALS, *TRANSFORMERS_INTERNALS, *TORCH_INTERNALS)
    written_for = {**LM_EVAL_OVERRIDES, **LM_EVAL_WRAPPED}
    chosen = set(ROTARY_FUNCTIONS if families is None else families)
    rotary = [path for family, path in ROTARY_FUNCTIONS.items() if family in chosen]
    for path in (*paths, *written_for, *rotary):
        try:
            obj = _resolve(path)
        except (ImportError, AttributeError) as exc:
            missing.append(f"{path}: {exc}")
            continue
        if path in written_for:
            params = tuple(inspect.signature(obj).parameters)
            if params != written_for[path]:
                missing.append(f"{path}: parameters {params}, posgen wraps {written_for[path]}")
        elif path in rotary and rotary_problem(obj):
            missing.append(f"{path}: {rotary_problem(obj)}")
    from posgen.compat.patches import instance_forward_problems
    from posgen.compat.position_families import position_family_problems

    return missing + instance_forward_problems() + position_family_problems()


def require(families: Iterable[str] | None = None) -> None:
    """Raise :class:`CompatError` listing every problem :func:`check` finds (``families``:
    as there): what a command calls before its first cell, so a run that would meet a
    moved internal stops before any work instead of after it."""
    problems = check(families)
    if problems:
        raise CompatError(
            f"posgen does not match the installed libraries ({_installed()}; tested with "
            f"lm-eval {LM_EVAL_TESTED}, transformers {TRANSFORMERS_TESTED}, torch "
            f"{TORCH_TESTED}): " + "; ".join(problems)
        )


def _installed() -> str:
    return ", ".join(f"{lib} {_version(lib)}" for lib in ("lm_eval", "transformers", "torch"))


def evaluation_tracker(output_path: str | None) -> Any:
    """lm-eval's ``EvaluationTracker`` writing under ``output_path`` (None: set its
    ``output_path`` before saving; nothing goes to the hub):
    ``output_path/<model>/results_<date>.json`` and ``samples_<task>_<date>.jsonl``."""
    return internal("lm_eval.loggers:EvaluationTracker")(output_path=output_path)


# the patches and posgen's attention functions (they use the lists above)
from posgen.compat.attention import (  # noqa: E402
    attention_implementation,
    base_implementation,
    register_attention,
    using_attention,
)
from posgen.compat.patches import (  # noqa: E402
    TASK_MANAGER_HOMES,
    forward_replaced,
    install_task_manager,
    namespace_response_cache,
    patched,
    patched_rotary,
    plain_response_cache,
    replace_task_manager,
    task_manager_installed,
    wrapped_method,
)

__all__ = [
    "LM_EVAL_ATTRIBUTES",
    "LM_EVAL_INTERNALS",
    "LM_EVAL_OVERRIDES",
    "LM_EVAL_TESTED",
    "LM_EVAL_WRAPPED",
    "ROTARY_FUNCTIONS",
    "ROTARY_PARAMETERS",
    "TASK_MANAGER_HOMES",
    "TORCH_INTERNALS",
    "TORCH_TESTED",
    "TRANSFORMERS_ATTRIBUTES",
    "TRANSFORMERS_INTERNALS",
    "TRANSFORMERS_TESTED",
    "CompatError",
    "UnsupportedLmEvalError",
    "attention_implementation",
    "attn_implementation",
    "base_implementation",
    "check",
    "evaluation_tracker",
    "forward_replaced",
    "install_task_manager",
    "internal",
    "is_kernel_wrapper",
    "namespace_response_cache",
    "patched",
    "patched_rotary",
    "plain_response_cache",
    "register_attention",
    "replace_task_manager",
    "require",
    "require_supported_lm_eval",
    "rotary_function",
    "rotary_problem",
    "task_manager_installed",
    "using_attention",
    "wrapped_method",
]
