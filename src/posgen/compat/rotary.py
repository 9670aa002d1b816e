"""A model family's ``apply_rotary_pos_emb``: the function posgen calls and wraps.

transformers 5.24 defines it as a plain function of the family's modeling module. From
transformers 5.25, when the ``kernels`` package is installed (a dependency of 5.25), the
decorator ``@use_kernel_forward_from_hub("rotary_pos_emb")`` replaces it there by an
instance of an ``nn.Module`` class (kernels 0.19, ``_create_func_module``) whose
``forward(self, *args, **kwargs)`` calls the original function, or a hub kernel where
``kernelize`` gave the model one (CUDA, ROCm and XPU only: transformers maps no rotary
kernel on CPU). The class carries a ``kernel_layer_name`` attribute; the function is held
only in the closure of its ``forward``, as ``func``: :func:`rotary_function` takes it from
there (:data:`KERNELS_CARRIED_FUNCTION`), and :func:`rotary_problem` refuses a wrapper
whose function cannot be found or does not take :data:`ROTARY_PARAMETERS` first.

posgen's rotations (``heads=``' twin rotation, the decomposition's capture, Λ attention)
run the carried function: the family's own torch code, the same in 5.24 and 5.25. Inside
a ``heads=`` block (:func:`posgen.compat.patched_rotary`) every layer of the family
rotates by it, also where ``kernelize`` gave the model a hub rotary kernel (a GPU with
the hub reachable), so the block's numbers are the torch code's there too.
"""

from __future__ import annotations

import inspect
from typing import Any

# the parameters posgen's wrapper of a family's rotary function is written for
ROTARY_PARAMETERS = ("q", "k", "cos", "sin")
# the form of the function-wrapping module of kernels 0.19 (transformers 5.25)
KERNELS_CARRIED_FUNCTION = (
    "kernels: a function decorated with use_kernel_forward_from_hub is an instance of an "
    "nn.Module class with kernel_layer_name whose forward holds the function as 'func'"
)


def is_kernel_wrapper(obj: Any) -> bool:
    """Whether ``obj`` is a function turned into a module by the ``kernels`` package's
    ``use_kernel_forward_from_hub`` (an instance carrying ``kernel_layer_name``)."""
    return not inspect.isroutine(obj) and hasattr(type(obj), "kernel_layer_name")


def carried_function(obj: Any) -> Any:
    """The function a ``kernels`` wrapper module ``obj`` carries (None: not found)."""
    forward = getattr(type(obj), "forward", None)
    if not inspect.isfunction(forward):
        return None
    carried = inspect.getclosurevars(forward).nonlocals.get("func")
    return carried if inspect.isfunction(carried) else None


def rotary_function(obj: Any) -> Any:
    """The plain ``apply_rotary_pos_emb`` that ``obj`` (a modeling module's attribute) is
    or, as a ``kernels`` wrapper (transformers 5.25), carries. A wrapper without a
    function found raises :class:`~posgen.compat.CompatError`."""
    if not is_kernel_wrapper(obj):
        return obj
    carried = carried_function(obj)
    if carried is None:
        from posgen.compat import TRANSFORMERS_TESTED, CompatError

        raise CompatError(
            f"{type(obj).__module__}: apply_rotary_pos_emb is a kernels wrapper "
            f"({type(obj).__qualname__}) whose function posgen cannot find (it expects "
            f"{KERNELS_CARRIED_FUNCTION}); tested with transformers {TRANSFORMERS_TESTED}"
        )
    return carried


def rotary_problem(obj: Any) -> str:
    """Why ``obj`` is not, and carries no, ``apply_rotary_pos_emb(q, k, cos, sin, ...)``
    ('' if it is or carries one)."""
    if is_kernel_wrapper(obj):
        fn = carried_function(obj)
        if fn is None:
            return f"a kernels wrapper without the function it should carry ({KERNELS_CARRIED_FUNCTION})"
        prefix = "the function its kernels wrapper carries: "
    else:
        fn, prefix = obj, ""
    try:
        params = tuple(inspect.signature(fn).parameters)[: len(ROTARY_PARAMETERS)]
    except (TypeError, ValueError) as exc:
        return f"{prefix}no signature ({exc})"
    if params == ROTARY_PARAMETERS:
        return ""
    return f"{prefix}parameters start {params}, not {ROTARY_PARAMETERS}"
