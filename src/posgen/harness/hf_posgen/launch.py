"""hf-posgen in an ``accelerate launch`` / ``torchrun`` launch: rank and world size.

HFLM takes them from its accelerator only when it counts more than one GPU (on CPU every
process stays rank 0 of 1 and scores every document) and never for a built model, so
hf-posgen sets the launch up before any weights load (:func:`launch_accelerator`) and
joins it after HFLM is built (:func:`join_launch`).
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any


def launch_accelerator() -> Any:
    """The accelerator of a launch (``WORLD_SIZE > 1``), set up as lm-eval's HFLM does
    (a 52-week process-group timeout); None outside one."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return None
    from accelerate import Accelerator, InitProcessGroupKwargs

    accelerator = Accelerator(kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(weeks=52))])
    if accelerator.num_processes <= 1:
        raise RuntimeError(
            f"WORLD_SIZE={world} but accelerate sees one process (every process would "
            "score every document); on CPU set ACCELERATE_USE_CPU=true and launch with "
            "accelerate launch --multi_gpu --num_processes N --num_machines 1"
        )
    return accelerator


def join_launch(lm: Any, launch: Any) -> None:
    """Give the built HFLM ``lm`` the rank and world size of its own accelerator or, when
    it has none, of ``launch`` (:func:`launch_accelerator`), when more than one process
    runs. Sets HFLM's ``accelerator``, ``_rank`` and ``_world_size``
    (``posgen.compat.LM_EVAL_ATTRIBUTES``)."""
    accelerator = getattr(lm, "accelerator", None) or launch
    if accelerator is not None and accelerator.num_processes > 1:
        lm.accelerator = accelerator
        lm._rank = accelerator.process_index
        lm._world_size = accelerator.num_processes
