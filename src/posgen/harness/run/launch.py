"""The processes of a data-parallel launch of ``posgen run`` (``accelerate launch`` or
``torchrun``), through accelerate, the way lm-eval's HF model sets itself up.

A launch is recognised by ``WORLD_SIZE > 1`` in the environment (set by both
launchers). Every process then runs the same cells in the same order: lm-eval shards
each cell's documents over the processes (``simple_evaluate``) and gathers the results
on rank 0, which alone writes the run folder; the decomposition, scores and report run
on rank 0 too. The other ranks write nothing. On CPU, launch with
``ACCELERATE_USE_CPU=true accelerate launch --multi_gpu --num_processes N
--num_machines 1 -m posgen run ...`` (gloo); ``accelerate launch --cpu`` starts one
process only.

Outside a launch (one process) this is a no-op with rank 0 of 1, and accelerate is
not imported.
"""

from __future__ import annotations

import os
from datetime import timedelta
from typing import Any

# as lm-eval's HFLM: ranks wait for one another at every cell's gather, and rank 0
# alone fits the decomposition and writes the report meanwhile
PROCESS_GROUP_TIMEOUT = timedelta(weeks=52)


class Launch:
    """Rank, world size and the few collectives ``posgen run`` needs."""

    def __init__(self, accelerator: Any = None) -> None:
        self.accelerator = accelerator

    @classmethod
    def detect(cls) -> Launch:
        """The launch this process belongs to; sets up the process group when there is
        one (before any model loads, so lm-eval's HFLM joins the same group)."""
        if int(os.environ.get("WORLD_SIZE", "1")) <= 1:
            return cls()
        from accelerate import Accelerator, InitProcessGroupKwargs

        kwargs = InitProcessGroupKwargs(timeout=PROCESS_GROUP_TIMEOUT)
        accelerator = Accelerator(kwargs_handlers=[kwargs])
        if accelerator.num_processes <= 1:
            raise RuntimeError(
                f"WORLD_SIZE={os.environ['WORLD_SIZE']} but accelerate set up one process; "
                "on CPU launch with ACCELERATE_USE_CPU=true accelerate launch --multi_gpu "
                "--num_processes N --num_machines 1 (docs/running.md)"
            )
        return cls(accelerator)

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
