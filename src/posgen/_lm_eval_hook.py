"""Start-up hook that makes posgen's model and tasks visible to the plain ``lm_eval`` CLI.

lm-eval 0.4.13 has no plugin discovery: its model registry only knows what was imported
before the model is built. A ``.pth`` file in site-packages runs this module at
interpreter start; it does nothing (and imports nothing heavy) unless the process is the
``lm_eval`` / ``lm-eval`` console script.
"""

from __future__ import annotations

import os
import sys

_CLI_NAMES = {"lm_eval", "lm-eval"}


def _is_lm_eval_cli(argv0: str) -> bool:
    name = os.path.basename(argv0)
    if name.endswith(".py"):
        name = name[:-3]
    return name in _CLI_NAMES or (name == "__main__.py" and "lm_eval" in argv0)


def activate() -> None:
    """Register posgen's lm-eval model and task resolver (idempotent)."""
    from posgen import lm_eval_plugin

    lm_eval_plugin.register_all()


def activate_if_lm_eval_cli() -> None:
    if os.environ.get("POSGEN_DISABLE_LM_EVAL_HOOK"):
        return
    argv0 = sys.argv[0] if sys.argv else ""
    if not _is_lm_eval_cli(argv0):
        return
    try:
        activate()
    except Exception as exc:  # never break the interpreter start-up; say why loudly
        print(f"posgen: could not register with lm_eval: {exc!r}", file=sys.stderr)
