"""Every place posgen reaches into lm-eval's or transformers' internals, in one module.

posgen is tested with lm-eval 0.4.13 and transformers 5.x; another lm-eval release is
refused by :func:`require_supported_lm_eval` (posgen uses its private task index and
factory) before any of its internals load. Outside their public APIs it
relies on the names listed in :data:`LM_EVAL_INTERNALS`, :data:`TRANSFORMERS_INTERNALS` and
:data:`TORCH_INTERNALS` (one private torch op);
every patch of a library function goes through a context manager here that restores the
original on exit, and the two process-wide changes (lm-eval's ``TaskManager`` in its CLI,
the key namespace of its response cache) have their own undo (:func:`install_task_manager`
returns one; :func:`plain_response_cache`). The methods of lm-eval's ``HFLM`` that
``hf-posgen`` overrides, private ones included, are listed with their parameters in
:data:`LM_EVAL_OVERRIDES`. :func:`check` verifies each internal against the installed libraries
(the test suite runs it), and each accessor raises :class:`CompatError` with one clear
message naming the internal and the tested version when an upgrade moved it, instead of
an ``AttributeError`` deep inside a run.

Imports of lm-eval and transformers happen inside the functions: importing this module
is free.
"""

from __future__ import annotations

import importlib
import importlib.metadata
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from importlib import metadata
from typing import Any

LM_EVAL_TESTED = "0.4.13"
TRANSFORMERS_TESTED = "5.x"
TORCH_TESTED = "2.13"

# "module:attribute" -> why posgen needs it
LM_EVAL_INTERNALS: dict[str, str] = {
    "lm_eval.tasks._index:Entry": "PosgenTaskManager adds index entries for perturbed names",
    "lm_eval.tasks._index:Kind": "the kind of an index entry (task, group, tag)",
    "lm_eval.tasks._yaml_loader:load_yaml": "reads a group's YAML to perturb its members",
    "lm_eval.config.group:GroupConfig": "the keys a perturbed group may inherit",
    "lm_eval.tasks:TaskManager": "replaced by PosgenTaskManager in the lm_eval CLI",
    "lm_eval.tasks.manager:TaskManager": "the same class, where the CLI imports it",
    "lm_eval.evaluator:TaskManager": "the same class, where simple_evaluate imports it",
    "lm_eval.tasks:TaskManager._entry": "PosgenTaskManager resolves unknown names there",
    "lm_eval.models.huggingface:pad_and_concat": "hf-posgen records HFLM's padding of a batch",
    "lm_eval.models.huggingface:Collator.get_batched": "hf-posgen reads each batch's continuations",
    "lm_eval.utils:get_rolling_token_windows": "hf-posgen traces each window to its document",
    "lm_eval.evaluator:add_env_info": "posgen run collects the environment report once",
    "lm_eval.evaluator:get_git_commit_hash": "posgen run asks git once, quietly",
    "lm_eval.loggers:EvaluationTracker": "posgen run writes each cell's output as lm-eval's CLI",
    "lm_eval.loggers:EvaluationTracker.save_results_aggregated": "results_<date>.json",
    "lm_eval.loggers:EvaluationTracker.save_results_samples": "samples_<task>_<date>.jsonl",
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
# attributes of objects (not importable paths) posgen reads: checked by the tests
TRANSFORMERS_ATTRIBUTES = {
    "PretrainedConfig._attn_implementation": "the attention function a model runs now",
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


@contextmanager
def attention_implementation(model: Any, name: str) -> Iterator[str]:
    """Within the block, ``model`` runs the attention implementation ``name`` (one
    registered with ``transformers.AttentionInterface``); its own is restored on exit,
    also after an error. Yields the name of its own. Raises :class:`CompatError` when the
    model does not take a registered implementation."""
    original = attn_implementation(model)
    try:
        if original != name:
            model.set_attn_implementation(name)
        if attn_implementation(model) != name:
            raise CompatError(
                f"{type(model).__name__} does not accept a registered attention "
                f"function (AttentionInterface {name!r})"
            )
        yield original
    finally:
        if attn_implementation(model) != original:
            model.set_attn_implementation(original)


# registered name -> the implementation it wraps ("" for a function that wraps none)
_REGISTERED_ATTENTION: dict[str, str] = {}


def register_attention(
    name: str, make_forward: Callable[[], Callable[..., Any]], mask: str, wraps: str = ""
) -> str:
    """Register ``make_forward()`` with ``transformers.AttentionInterface`` under ``name``
    (once per process), with the mask function of the implementation ``mask`` (``eager``,
    ``sdpa``, ...) under the same name in ``AttentionMaskInterface``: without it the
    function would get ``mask=None`` and attention would silently become non-causal.
    ``wraps``: the implementation the function calls through to, if any
    (:func:`base_implementation` sees through it). Returns ``name``."""
    if name in _REGISTERED_ATTENTION:
        return name
    from transformers import AttentionInterface, AttentionMaskInterface

    masks = internal("transformers.masking_utils:ALL_MASK_ATTENTION_FUNCTIONS")
    if mask not in masks:
        raise CompatError(
            f"{name}: transformers has no mask function for {mask!r}; load the model with "
            "attn_implementation='sdpa' or 'eager'"
        )
    AttentionInterface.register(name, make_forward())
    AttentionMaskInterface.register(name, masks[mask])
    _REGISTERED_ATTENTION[name] = wraps
    return name


def base_implementation(model: Any) -> str:
    """The attention implementation ``model`` runs, seen through posgen's wrappers (a
    model inside a qk-noise block still reports ``sdpa``)."""
    name = attn_implementation(model)
    while _REGISTERED_ATTENTION.get(name):
        name = _REGISTERED_ATTENTION[name]
    return name


@contextmanager
def using_attention(
    model: Any,
    name: str,
    make_forward: Callable[[], Callable[..., Any]],
    mask: str,
    wraps: str = "",
) -> Iterator[str]:
    """The one way posgen runs an attention function of its own (attention capture, qk
    noise, Λ attention): registered once (:func:`register_attention`), active within the
    block, the model's own implementation restored on exit
    (:func:`attention_implementation`). Yields the name of the model's own."""
    register_attention(name, make_forward, mask, wraps)
    with attention_implementation(model, name) as original:
        yield original


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


def check() -> list[str]:
    """Every internal that does not resolve in the installed libraries, and every
    overridden method whose parameters changed (empty: all as posgen expects)."""
    import inspect

    missing = []
    for path in (*LM_EVAL_INTERNALS, *TRANSFORMERS_INTERNALS, *TORCH_INTERNALS, *LM_EVAL_OVERRIDES):
        try:
            obj = _resolve(path)
        except (ImportError, AttributeError) as exc:
            missing.append(f"{path}: {exc}")
            continue
        if path in LM_EVAL_OVERRIDES:
            params = tuple(inspect.signature(obj).parameters)
            if params != LM_EVAL_OVERRIDES[path]:
                missing.append(
                    f"{path}: parameters {params}, posgen overrides {LM_EVAL_OVERRIDES[path]}"
                )
    return missing


def evaluation_tracker(output_path: str | None) -> Any:
    """lm-eval's ``EvaluationTracker`` writing under ``output_path`` (None: set its
    ``output_path`` before saving; nothing goes to the hub):
    ``output_path/<model>/results_<date>.json`` and ``samples_<task>_<date>.jsonl``."""
    return internal("lm_eval.loggers:EvaluationTracker")(output_path=output_path)


# ---------------------------------------------------------------- lm-eval patches
# the modules that bind lm-eval's TaskManager by name (the CLI and simple_evaluate read it
# from there)
TASK_MANAGER_HOMES = ("lm_eval.tasks", "lm_eval.tasks.manager", "lm_eval.evaluator")


def replace_task_manager(module: Any, cls: type) -> None:
    """Bind ``cls`` (a subclass of lm-eval's ``TaskManager``) as ``module.TaskManager`` when
    ``module`` still holds a class ``cls`` derives from (the start-up hook calls this as
    each home finishes loading)."""
    current = getattr(module, "TaskManager", None)
    if isinstance(current, type) and current is not cls and issubclass(cls, current):
        module.TaskManager = cls


def install_task_manager(cls: type) -> Callable[[], None]:
    """Make ``cls`` the ``TaskManager`` that lm-eval constructs in this process (its CLI,
    ``lm-eval ls tasks``, ``simple_evaluate`` without a ``task_manager``). Process-wide,
    as the ``lm_eval`` CLI needs it; returns a function that puts every original back."""
    originals = {}
    for where in TASK_MANAGER_HOMES:
        originals[where] = internal(f"{where}:TaskManager")
        importlib.import_module(where).TaskManager = cls

    def restore() -> None:
        for where, original in originals.items():
            importlib.import_module(where).TaskManager = original

    return restore


@contextmanager
def task_manager_installed(cls: type) -> Iterator[None]:
    """:func:`install_task_manager` within the block only."""
    restore = install_task_manager(cls)
    try:
        yield
    finally:
        restore()


# ---------------------------------------------------------------- the response cache
_NAMESPACED: dict[type, type] = {}


def namespace_response_cache(db: Any, namespace: str) -> None:
    """Make lm-eval's response cache ``db`` (a ``SqliteDict`` shared by its ``CachingLM``
    lookups and its ``CacheHook`` stores) prefix every key with ``namespace``, so an answer
    cached under one perturbation is never served under another. Its class is swapped for
    a subclass that rewrites the keys; :func:`plain_response_cache` swaps it back."""
    cls = type(db)
    if not getattr(cls, "_posgen_namespaced", False):
        if cls not in _NAMESPACED:
            _NAMESPACED[cls] = type(
                f"Namespaced{cls.__name__}",
                (cls,),
                {"_posgen_namespaced": True, **_NAMESPACED_METHODS},
            )
        db.__class__ = _NAMESPACED[cls]
    db._posgen_namespace = namespace


def plain_response_cache(db: Any) -> None:
    """Undo :func:`namespace_response_cache`: the cache's own class and keys again."""
    cls = type(db)
    if getattr(cls, "_posgen_namespaced", False):
        db.__class__ = cls.__mro__[1]
        del db._posgen_namespace


def _namespaced_key(db: Any, key: str) -> str:
    ns = db._posgen_namespace
    return f"posgen:{ns}:{key}" if ns else key


def _namespaced(name: str) -> Any:
    def method(self: Any, key: str, *args: Any) -> Any:
        return getattr(super(type(self), self), name)(_namespaced_key(self, key), *args)

    method.__name__ = name
    return method


_NAMESPACED_METHODS = {
    n: _namespaced(n) for n in ("__contains__", "__getitem__", "__setitem__", "__delitem__")
}


@contextmanager
def patched(path: str, make: Callable[[Any], Any]) -> Iterator[Any]:
    """Within the block, ``module:attr`` is ``make(original)``; the original is restored on
    exit, whatever happens. Yields the replacement."""
    module_name, _, attr = path.partition(":")
    original = internal(path)
    module = importlib.import_module(module_name)
    replacement = make(original)
    setattr(module, attr, replacement)
    try:
        yield replacement
    finally:
        setattr(module, attr, original)
