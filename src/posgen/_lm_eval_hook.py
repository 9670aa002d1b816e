"""Start-up hook that makes posgen's model and tasks visible to the plain ``lm_eval`` CLI.

lm-eval 0.4.13 has no plugin discovery: its model registry only knows what was imported
before the model is built. A ``.pth`` file in site-packages runs this module at
interpreter start; it does nothing (and imports nothing heavy) unless the process is the
``lm_eval`` / ``lm-eval`` console script.
"""

from __future__ import annotations

import itertools
import os
import sys

_CLI_NAMES = {"lm_eval", "lm-eval"}


def _is_lm_eval_cli(argv0: str, orig_argv: list[str]) -> bool:
    """The ``lm_eval``/``lm-eval`` console script, or ``python -m lm_eval`` (also as
    spawned by ``accelerate launch -m lm_eval``). During ``.pth`` processing ``sys.argv``
    of ``-m`` runs is still ``['-m', ...]``, so the interpreter's own argv is checked."""
    if os.path.basename(argv0).removesuffix(".py") in _CLI_NAMES:
        return True
    for flag, module in itertools.pairwise(orig_argv):
        if flag == "-m":
            return module.split(".")[0] == "lm_eval"
    return False


def activate() -> None:
    """Register posgen's lm-eval model and task resolver (idempotent)."""
    from posgen import lm_eval_plugin

    lm_eval_plugin.register_all()


def activate_if_lm_eval_cli() -> None:
    if os.environ.get("POSGEN_DISABLE_LM_EVAL_HOOK"):
        return
    argv0 = sys.argv[0] if sys.argv else ""
    if not _is_lm_eval_cli(argv0, list(getattr(sys, "orig_argv", []))):
        return
    try:
        activate()
    except Exception as exc:  # never break the interpreter start-up; say why loudly
        print(f"posgen: could not register with lm_eval: {exc!r}", file=sys.stderr)
