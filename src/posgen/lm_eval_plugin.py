"""Everything posgen registers with lm-evaluation-harness, in one place.

Called by posgen itself before it calls ``lm_eval.simple_evaluate``, and by users who call
lm-eval from Python. The ``lm_eval`` CLI gets the same registrations lazily from the
``.pth`` start-up hook (:mod:`posgen._lm_eval_hook`).
"""

from __future__ import annotations

_registered = False


def register_all() -> None:
    """Register the ``hf-posgen`` model and posgen's tasks with lm-eval (idempotent)."""
    global _registered
    if _registered:
        return
    import lm_eval.models  # noqa: F401  (built-ins first, or `--model hf` stops resolving)

    from posgen.harness.hf_posgen import model as lm_eval_model

    lm_eval_model.register()  # first: the model stays usable if the task side fails
    from posgen.tasks import lm_eval_tasks

    lm_eval_tasks.register()
    _registered = True
