"""One model's part of ``posgen run``: load once, evaluate cells, fit the decomposition.

Heavy imports (torch, transformers, lm-eval) live here, away from the CLI module.
"""

from __future__ import annotations

import contextlib
import gc
import io
import os
from pathlib import Path
from typing import Any

from posgen import __version__
from posgen.harness.run.config import Cell, ModelEntry, RunConfig
from posgen.results.store import RunStore, atomic_write_parquet, slug

_ENV_INFO: dict[str, Any] = {}
_GIT_HASH: list[Any] = []


@contextlib.contextmanager
def _env_info_once():
    """lm-eval adds torch's environment report and ``git describe`` of the working folder
    to every result (subprocesses each time; git prints "fatal: not a git repository" on
    the terminal outside one). Collect both once per process, git's stderr silenced, and
    reuse them, unchanged."""
    import lm_eval.evaluator

    original, original_git = lm_eval.evaluator.add_env_info, lm_eval.evaluator.get_git_commit_hash

    def cached(storage: dict[str, Any]) -> None:
        if not _ENV_INFO:
            original(_ENV_INFO)
        storage.update(_ENV_INFO)

    def cached_git():
        if not _GIT_HASH:
            with _stderr_fd_to_devnull():
                _GIT_HASH.append(original_git())
        return _GIT_HASH[0]

    lm_eval.evaluator.add_env_info = cached
    lm_eval.evaluator.get_git_commit_hash = cached_git
    try:
        yield
    finally:
        lm_eval.evaluator.add_env_info = original
        lm_eval.evaluator.get_git_commit_hash = original_git


@contextlib.contextmanager
def _stderr_fd_to_devnull():
    """File descriptor 2 to /dev/null (subprocesses inherit it; sys.stderr alone would not do)."""
    saved = os.dup(2)
    try:
        with open(os.devnull, "w") as null:
            os.dup2(null.fileno(), 2)
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)


class ModelSession:
    """``with ModelSession(store, config, model) as s: s.evaluate(cell); s.decompose()``.

    Holds one ``HFPosgenLM`` (the model loaded once); each cell switches the model-side
    perturbation with ``set_perturbation`` and runs ``lm_eval.simple_evaluate`` on one
    task. lm-eval's own log and progress bars go to ``raw/<model>/lm_eval.log``.
    """

    def __init__(
        self, store: RunStore, config: RunConfig, model: ModelEntry, device: str | None = None
    ):
        self.store, self.config, self.model, self.device = store, config, model, device
        self.lm: Any = None
        self.task_manager: Any = None

    def __enter__(self) -> ModelSession:
        import torch

        from posgen.harness.hf_posgen.model import HFPosgenLM
        from posgen.harness.run.plan import shared_task_manager
        from posgen.lm_eval_plugin import register_all

        register_all()
        self.task_manager = shared_task_manager()
        device = self.device or ("cuda" if torch.cuda.is_available() else "cpu")
        kwargs = {
            "batch_size": self.config.batch_size,
            "device": device,
            "dtype": self.model.dtype,
            **({} if self.model.random_init else self.model.load_options()),
        }
        with self._quiet():
            if self.model.random_init:
                net, tok = self._random_init_twin()
                self.lm = HFPosgenLM(pretrained=net, tokenizer=tok, **kwargs)
            else:
                self.lm = HFPosgenLM(pretrained=self.model.path, **kwargs)
        return self

    def __exit__(self, *exc: object) -> None:
        self.lm = None
        gc.collect()

    def _random_init_twin(self):
        from transformers import AutoConfig, AutoTokenizer

        from posgen.harness.decomposition.pipeline import random_init_twin
        from posgen.harness.embedded import resolve_pretrained

        path = resolve_pretrained(self.model.path)
        net = random_init_twin(
            AutoConfig.from_pretrained(path), seed=self.config.random_init_seed, name=path
        )
        return net, AutoTokenizer.from_pretrained(path)

    @contextlib.contextmanager
    def _quiet(self):
        """lm-eval's stderr (progress bars, warnings) into the model's log file."""
        log = self.store.root / "raw" / slug(self.model.label) / "lm_eval.log"
        log.parent.mkdir(parents=True, exist_ok=True)
        with (
            open(log, "a", encoding="utf-8") as f,
            contextlib.redirect_stderr(f),
            contextlib.redirect_stdout(io.StringIO()),
        ):
            yield

    def evaluate(self, cell: Cell) -> Path:
        """Run one cell through lm-eval and write it (raw results, samples, record)."""
        import lm_eval

        from posgen.results.tidy import cell_record

        cfg = self.config
        self.lm.set_perturbation(positions=cell.positions, features=cell.features, seed=cell.seed)
        task = cell.lm_eval_task
        with self._quiet(), _env_info_once():
            out = lm_eval.simple_evaluate(
                model=self.lm,
                tasks=[task],
                task_manager=self.task_manager,
                limit=cfg.limits[cell.task],
                log_samples=True,
                bootstrap_iters=0,
                verbosity="ERROR",
                random_seed=cfg.seed,
                numpy_random_seed=cfg.seed,
                torch_random_seed=cfg.seed,
                fewshot_random_seed=cfg.seed,
            )
        if out is None:  # a non-zero rank of a data-parallel launch gets no results
            raise RuntimeError(
                "posgen run is one process; for several GPUs run lm-eval's "
                "data-parallel path (docs/running.md: accelerate launch)"
            )
        task_cfg = out["configs"].get(task, {})
        split = task_cfg.get("test_split") or task_cfg.get("validation_split") or "test"
        record = cell_record(  # results/ takes plain data: no harness types cross
            {**cell.record(), "split": split},
            self.model.info(),
            out["results"],
            out["samples"],
            __version__,
            seed=cfg.seed,
        )
        raw = {
            k: out.get(k)
            for k in (
                "results",
                "configs",
                "versions",
                "n-shot",
                "higher_is_better",
                "n-samples",
                "config",
            )
        }
        return self.store.write_cell(
            self.model.label, cell.cell_id, record, raw_results=raw, samples=out["samples"]
        )

    def decompose(self) -> Path:
        """The per-(doc, layer, head) decomposition of the loaded weights."""
        from posgen.harness.decomposition.pipeline import decompose_model

        spec = self.config.decompose
        self.lm.set_perturbation(positions=None, features=None)
        with self._quiet():
            table = decompose_model(
                self.lm.model,
                tokenizer=self.lm.tokenizer,
                docs=spec.docs,
                tokens=spec.tokens,
                seed=self.config.seed,
                progress=False,
            )
        table["model"] = self.model.label
        table["random_init"] = self.model.random_init
        path = self.store.decomposition_path(self.model.label)
        atomic_write_parquet(path, table)
        return path
