"""Start-up hook that makes posgen's model and tasks visible to the plain ``lm_eval`` CLI.

lm-eval 0.4.13 has no plugin discovery: its model registry only knows what was imported
before the model is built. A ``.pth`` file in site-packages runs this module at
interpreter start; it does nothing unless the process is the ``lm_eval`` / ``lm-eval``
console script, and even then it imports nothing that lm-eval itself would not:

- the ``hf-posgen`` model is registered by name (a lazy placeholder in lm-eval's model
  registry, :func:`posgen.lm_eval_plugin.register_model`), so torch and posgen's model
  load only when ``--model hf-posgen`` is asked for;
- posgen's task manager is put in place when lm-eval itself imports ``lm_eval.tasks``
  or ``lm_eval.evaluator`` (an import hook), never before.

Nothing is written into lm-eval's own package folder.
"""

from __future__ import annotations

import importlib.abc
import itertools
import os
import sys
from typing import Any

_CLI_NAMES = {"lm_eval", "lm-eval"}
# module loaded -> modules whose TaskManager is replaced right after it has loaded
# (lm_eval.tasks imports lm_eval.tasks.manager; lm_eval.evaluator binds the class itself)
_PATCH_AFTER = {
    "lm_eval.tasks": ("lm_eval.tasks.manager", "lm_eval.tasks"),
    "lm_eval.evaluator": ("lm_eval.evaluator",),
}


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


def _patch_task_manager(module: Any) -> None:
    from posgen.tasks import lm_eval_tasks

    lm_eval_tasks.register_in(module)


class _PatchAfterImport(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Loads the named lm-eval modules as usual, then puts posgen's task manager in them."""

    def find_spec(self, fullname: str, path: Any, target: Any = None) -> Any:
        if fullname not in _PATCH_AFTER:
            return None
        spec = None
        for finder in sys.meta_path:  # the finder that would load it without this hook
            if finder is not self and hasattr(finder, "find_spec"):
                spec = finder.find_spec(fullname, path, target)
                if spec is not None:
                    break
        if spec is None or spec.loader is None:
            return None
        self._loaders = {**getattr(self, "_loaders", {}), fullname: spec.loader}
        spec.loader = self
        return spec

    def create_module(self, spec: Any) -> Any:
        return self._loaders[spec.name].create_module(spec)

    def exec_module(self, module: Any) -> None:
        self._loaders[module.__name__].exec_module(module)
        for name in _PATCH_AFTER[module.__name__]:
            _patch_task_manager(sys.modules[name])


def activate() -> None:
    """Register posgen's lm-eval model and task manager lazily (idempotent)."""
    from posgen.lm_eval_plugin import register_model

    register_model()
    if any(name in sys.modules for name in _PATCH_AFTER):
        from posgen.tasks import lm_eval_tasks

        lm_eval_tasks.register()
    elif not any(isinstance(f, _PatchAfterImport) for f in sys.meta_path):
        sys.meta_path.insert(0, _PatchAfterImport())


def refuse_bad_model_args_in_one_line() -> None:
    """In the ``lm_eval`` CLI, a posgen ``PerturbationError`` that reaches the top (bad
    ``hf-posgen`` model arguments: ``layers=99``, ``layers=a``, ``heads=`` without
    ``layers=``, ...; a generative task under a scheme generation does not run, refused
    as ``generate_until`` starts; an evidence-depth task without its passage fields or
    with a bad document, as the tasks are matched before the model loads) or ``CompatError`` (an installed release moved an internal
    ``hf-posgen`` uses: checked as the model is built, before its weights load) ends the
    process with its one-line message on stderr and exit status 2, not under lm-eval's
    traceback; any other exception is shown as before."""
    from posgen.lm_eval_plugin import MODEL_NAME

    previous = sys.excepthook

    def hook(kind: type[BaseException], exc: BaseException, tb: Any) -> None:
        base = sys.modules.get("posgen.perturbations.base")
        compat = sys.modules.get("posgen.compat")
        refused = tuple(
            cls
            for cls in (
                getattr(base, "PerturbationError", None),
                getattr(compat, "CompatError", None),
            )
            if cls is not None
        )
        if not refused or not isinstance(exc, refused):
            previous(kind, exc, tb)
            return
        import logging

        logging.shutdown()
        sys.stdout.flush()
        # a task's refusal names posgen's tasks (``origin``), the rest hf-posgen
        sys.stderr.write(f"lm_eval: {getattr(exc, 'origin', MODEL_NAME)}: {exc}\n")
        sys.stderr.flush()
        os._exit(2)  # past the interpreter's exit status 1 for an uncaught exception

    sys.excepthook = hook


def activate_if_lm_eval_cli() -> None:
    if os.environ.get("POSGEN_DISABLE_LM_EVAL_HOOK"):
        return
    argv0 = sys.argv[0] if sys.argv else ""
    if not _is_lm_eval_cli(argv0, list(getattr(sys, "orig_argv", []))):
        return
    try:
        activate()
        refuse_bad_model_args_in_one_line()
    except Exception as exc:  # never break the interpreter start-up; say why loudly
        print(f"posgen: could not register with lm_eval: {exc!r}", file=sys.stderr)
