"""Everything posgen registers with lm-evaluation-harness, in one place.

The ``hf-posgen`` model is registered by name (:data:`MODEL_NAME`) with the path of its
class (:data:`MODEL_TARGET`): lm-eval's registry imports the class (torch, transformers)
only when the model is asked for, so registering costs nothing and this module imports
nothing of posgen's model side. posgen's tasks are registered by making
:class:`posgen.tasks.lm_eval_tasks.PosgenTaskManager` lm-eval's ``TaskManager``.

Three paths lead here: posgen itself before it calls ``lm_eval.simple_evaluate``
(:func:`register_all`), users who call lm-eval from Python (the same), and the plain
``lm_eval`` CLI through the ``.pth`` start-up hook (:mod:`posgen._lm_eval_hook`, which
calls :func:`register_model` and puts the task manager in place as lm-eval loads). The
``lm_eval.models`` entry point in ``pyproject.toml`` names the same class for lm-eval
releases that discover plugins (a test keeps it equal to :data:`MODEL_TARGET`).
"""

from __future__ import annotations

MODEL_NAME = "hf-posgen"
MODEL_TARGET = "posgen.harness.hf_posgen.model:HFPosgenLM"


def register_model() -> None:
    """``hf-posgen`` in lm-eval's model registry, resolved to :data:`MODEL_TARGET` on
    first use (idempotent; imports no torch)."""
    import lm_eval.models  # noqa: F401  (built-ins first, or `--model hf` stops resolving)
    from lm_eval.api.registry import model_registry

    if MODEL_NAME not in model_registry:
        model_registry.register(MODEL_NAME, target=MODEL_TARGET)


def register_all() -> None:
    """Register the ``hf-posgen`` model and posgen's tasks with lm-eval (idempotent;
    :func:`posgen.tasks.lm_eval_tasks.unregister` undoes the task side)."""
    register_model()  # first: the model stays usable if the task side fails
    from posgen.tasks import lm_eval_tasks

    lm_eval_tasks.register()
