"""The processes of a data-parallel launch (``accelerate launch`` or ``torchrun``),
through accelerate, the way lm-eval's HF model sets itself up: one detection for
``posgen run`` and ``hf-posgen``.

A launch is recognised by ``WORLD_SIZE > 1`` in the environment (set by both
launchers); :func:`launch_accelerator` then sets the process group up, before any model
loads (a 52-week timeout, as lm-eval's HFLM: ranks wait for one another at every cell's
gather, and rank 0 alone fits the decomposition and writes the report meanwhile).
Outside a launch (one process) there is none, with rank 0 of 1, and accelerate is not
imported.

- ``posgen run`` (:class:`Launch`): every process runs the same cells in the same order:
  lm-eval shards each cell's documents over the processes (``simple_evaluate``) and
  gathers the results on rank 0, which alone writes the run folder; the decomposition,
  scores and report run on rank 0 too. The other ranks write nothing.
- ``hf-posgen`` (:func:`join_launch`): HFLM takes the rank and world size from its
  accelerator only when it counts more than one GPU (on CPU every process stays rank 0
  of 1 and scores every document) and never for a built model, so hf-posgen sets the
  launch up before any weights load and joins it after HFLM is built.

On CPU, launch with ``ACCELERATE_USE_CPU=true accelerate launch --multi_gpu
--num_processes N --num_machines 1 -m posgen run ...`` (gloo); ``accelerate launch
--cpu`` starts one process only.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

PROCESS_GROUP_TIMEOUT = timedelta(weeks=52)


def launch_accelerator() -> Any:
    """The accelerator of the launch this process belongs to (``WORLD_SIZE > 1``), its
    process group set up as lm-eval's HFLM does; None outside one."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return None
    from accelerate import Accelerator, InitProcessGroupKwargs

    kwargs = InitProcessGroupKwargs(timeout=PROCESS_GROUP_TIMEOUT)
    accelerator = Accelerator(kwargs_handlers=[kwargs])
    if accelerator.num_processes <= 1:
        raise RuntimeError(
            f"WORLD_SIZE={world} but accelerate set up one process (every process would "
            "score every document); on CPU launch with ACCELERATE_USE_CPU=true accelerate "
            "launch --multi_gpu --num_processes N --num_machines 1 (docs/running.md)"
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


class Launch:
    """Rank, world size and the few collectives ``posgen run`` needs."""

    def __init__(self, accelerator: Any = None) -> None:
        self.accelerator = accelerator

    @classmethod
    def detect(cls) -> Launch:
        """The launch this process belongs to (:func:`launch_accelerator`; before any
        model loads, so lm-eval's HFLM joins the same group)."""
        return cls(launch_accelerator())

    @property
    def rank(self) -> int:
        return 0 if self.accelerator is None else int(self.accelerator.process_index)

    @property
    def world_size(self) -> int:
        return 1 if self.accelerator is None else int(self.accelerator.num_processes)

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    def share(self, obj: Any) -> Any:
        """Rank 0's ``obj`` on every rank (pickled)."""
        if self.accelerator is None:
            return obj
        from accelerate.utils import broadcast_object_list

        return broadcast_object_list([obj], from_process=0)[0]

    def gather(self, obj: Any) -> list[Any]:
        """Every rank's ``obj``, in rank order, on every rank (pickled)."""
        if self.accelerator is None:
            return [obj]
        from accelerate.utils import gather_object

        return gather_object([obj])

    def finish(self) -> None:
        """A final barrier, then the process group is closed (without the barrier, ranks
        that leave first can abort the others at exit)."""
        if self.accelerator is not None:
            self.accelerator.wait_for_everyone()
            self.accelerator.end_training()
