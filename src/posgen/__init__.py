"""posgen: measure how well a language model tolerates perturbed positions, and explain why.

The public API, imported lazily (``import posgen`` loads no torch or lm-eval)::

    import posgen
    p = posgen.parse("text", "swap:0.05")            # a seeded, versioned perturbation
    p.apply("the quick brown fox jumps", seed=1234).text
    table = posgen.decompose("embedded", docs=2)      # W[i,j] ≈ a[i-j] + b[i] + c[j] per head
    tm = posgen.task_manager()                        # lm-eval TaskManager with perm_* tasks
    lm = posgen.HFPosgenLM(pretrained="embedded", positions="swap:0.05")

See the README for the command line, which wraps the same functions.
"""

from __future__ import annotations

import importlib
from typing import Any

__version__ = "0.1.0"

# public name -> "module:attribute"
_EXPORTS = {
    "parse": "posgen.perturbations:parse",
    "registry": "posgen.perturbations:registry",
    "PerturbationError": "posgen.perturbations:PerturbationError",
    "task_manager": "posgen.tasks.lm_eval_tasks:task_manager",
    "HFPosgenLM": "posgen.harness.hf_posgen.model:HFPosgenLM",
    "decompose": "posgen.harness.decomposition.pipeline:decompose_model",
}

__all__ = ["__version__", *_EXPORTS]


def __getattr__(name: str) -> Any:
    target = _EXPORTS.get(name)
    if target is None:
        raise AttributeError(f"module 'posgen' has no attribute {name!r}")
    module, attr = target.split(":")
    value = getattr(importlib.import_module(module), attr)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
