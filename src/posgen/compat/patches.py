"""Every patch posgen makes to another library's object, each with its undo.

Within a block (restored on exit, whatever happens): :func:`patched` (a module attribute
listed in :mod:`posgen.compat`), :func:`patched_rotary` (a model family's
``apply_rotary_pos_emb``), :func:`forward_replaced` (a torch module's ``forward``).
On one lm-eval object, returning its undo: :func:`wrapped_method`.
Process-wide, each returning or having its undo: lm-eval's ``TaskManager``
(:func:`install_task_manager`, :func:`replace_task_manager`) and the key namespace of
its response cache (:func:`namespace_response_cache`, :func:`plain_response_cache`).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Any

from posgen.compat import (
    LM_EVAL_INTERNALS,
    LM_EVAL_WRAPPED,
    TRANSFORMERS_INTERNALS,
    TRANSFORMERS_TESTED,
    CompatError,
    internal,
    rotary_function,
    rotary_problem,
)

# ---------------------------------------------------------------- lm-eval patches
# the modules that bind lm-eval's TaskManager by name (the CLI and simple_evaluate read it
# from there)
TASK_MANAGER_HOMES = ("lm_eval.tasks", "lm_eval.tasks.manager", "lm_eval.evaluator")


def replace_task_manager(module: Any, cls: type) -> Callable[[], None]:
    """Bind ``cls`` (a subclass of lm-eval's ``TaskManager``) as ``module.TaskManager`` when
    ``module`` still holds a class ``cls`` derives from (the start-up hook calls this as
    each home finishes loading). Returns a function that puts the class found back."""
    current = getattr(module, "TaskManager", None)
    if not (isinstance(current, type) and current is not cls and issubclass(cls, current)):
        return lambda: None
    module.TaskManager = cls

    def restore() -> None:
        module.TaskManager = current

    return restore


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
    exit, whatever happens. Yields the replacement. ``path`` must be listed in
    :data:`LM_EVAL_INTERNALS` or :data:`TRANSFORMERS_INTERNALS` (so :func:`check` sees it)."""
    if path not in LM_EVAL_INTERNALS and path not in TRANSFORMERS_INTERNALS:
        raise CompatError(f"{path} is patched but not listed in posgen.compat (add it)")
    with _patched(path, make) as replacement:
        yield replacement


@contextmanager
def patched_rotary(module: str, name: str, make: Callable[[Any], Any]) -> Iterator[Any]:
    """:func:`patched` for a model family's ``apply_rotary_pos_emb`` in its modeling module
    ``module`` (listed in :data:`ROTARY_FUNCTIONS` or an unlisted family's): refused with a
    :class:`CompatError` unless it takes :data:`ROTARY_PARAMETERS` first. ``make`` gets the
    plain function: the attribute itself (transformers 5.24), or the function its
    ``kernels`` wrapper carries (5.25, :func:`posgen.compat.rotary_function`); the
    attribute (the wrapper) is put back on exit."""
    path = f"{module}:{name}"
    found = internal(path)
    problem = rotary_problem(found)
    if problem:
        raise CompatError(
            f"{path}: {problem}; posgen wraps it as apply_rotary_pos_emb(q, k, cos, sin) "
            f"(tested with transformers {TRANSFORMERS_TESTED})"
        )
    with _patched(path, lambda original: make(rotary_function(original))) as replacement:
        yield replacement


@contextmanager
def _patched(path: str, make: Callable[[Any], Any]) -> Iterator[Any]:
    module_name, _, attr = path.partition(":")
    original = internal(path)
    module = importlib.import_module(module_name)
    replacement = make(original)
    setattr(module, attr, replacement)
    try:
        yield replacement
    finally:
        setattr(module, attr, original)


# ---------------------------------------------------------------- torch modules
@contextmanager
def forward_replaced(module: Any, forward: Callable[..., Any]) -> Iterator[None]:
    """Within the block, calling ``module`` (a ``torch.nn.Module``) runs ``forward``: an
    instance attribute, which ``Module.__call__`` looks up before the class's ``forward``
    (:func:`check` verifies it). Its hooks still run around it. An instance-level
    ``forward`` it had (accelerate's device hooks put one there) is put back on exit,
    whatever happens."""
    had = "forward" in module.__dict__
    saved = module.__dict__.get("forward")
    module.forward = forward
    try:
        yield
    finally:
        if had:
            module.forward = saved
        else:
            del module.forward


def instance_forward_problems() -> list[str]:
    """[] when torch runs an instance's own ``forward`` and restores the class's after
    :func:`forward_replaced` (part of :func:`posgen.compat.check`); else what went wrong."""
    import torch

    layer, x = torch.nn.Identity(), torch.zeros(1)
    with forward_replaced(layer, lambda *args, **kwargs: "replaced"):
        inside = layer(x)
    if inside != "replaced" or layer(x) is not x:
        return ["torch.nn:Module.__call__: an instance's own forward is not what it runs"]
    return []


# ---------------------------------------------------------------- lm-eval objects
def wrapped_method(obj: Any, name: str, make: Callable[[Any], Any]) -> Callable[[], None]:
    """``obj.name`` becomes ``make(the bound method)`` on this one object (an instance
    attribute; its class and every other instance are untouched), for the object's
    lifetime. The method must be listed in :data:`LM_EVAL_WRAPPED` for a class ``obj``
    is an instance of (so :func:`check` sees its parameters). Returns the undo."""
    listed = [
        path
        for path in LM_EVAL_WRAPPED
        if path.rsplit(".", 1)[1] == name and isinstance(obj, internal(path.rsplit(".", 1)[0]))
    ]
    if not listed:
        raise CompatError(
            f"{type(obj).__name__}.{name} is wrapped but not listed in posgen.compat (add it)"
        )
    had = name in vars(obj)
    saved = vars(obj).get(name)
    setattr(obj, name, make(getattr(obj, name)))

    def restore() -> None:
        if had:
            setattr(obj, name, saved)
        else:
            delattr(obj, name)

    return restore
