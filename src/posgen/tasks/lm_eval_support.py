"""The lm-evaluation-harness release posgen works with, checked before its internals load.

posgen builds on lm-eval's task index and task factory (``lm_eval.tasks._index``,
``TaskManager._factory``), which are private and change between releases; it is tested
with lm-eval 0.4.13 only. Any other release is refused with a message saying so, rather
than failing somewhere inside a run.
"""

from __future__ import annotations

from importlib import metadata

SUPPORTED_LM_EVAL = "0.4.13"


class UnsupportedLmEvalError(RuntimeError):
    """The installed lm-eval is not the release posgen is tested with."""


def require_supported_lm_eval(installed: str | None = None) -> None:
    """Raise :class:`UnsupportedLmEvalError` unless lm-eval ``SUPPORTED_LM_EVAL`` is installed
    (a local or development build of that release, ``0.4.13+local``, is accepted)."""
    if installed is None:
        try:
            installed = metadata.version("lm_eval")
        except metadata.PackageNotFoundError:
            raise UnsupportedLmEvalError(
                f"lm-eval is not installed; posgen needs lm-eval=={SUPPORTED_LM_EVAL}: "
                f"pip install 'lm-eval[hf]=={SUPPORTED_LM_EVAL}'"
            ) from None
    release = installed.split("+")[0]
    if release != SUPPORTED_LM_EVAL:
        raise UnsupportedLmEvalError(
            f"posgen is tested with lm-eval {SUPPORTED_LM_EVAL} only and uses its task "
            f"internals, but lm-eval {installed} is installed: "
            f"pip install 'lm-eval[hf]=={SUPPORTED_LM_EVAL}'"
        )
