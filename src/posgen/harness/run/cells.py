"""One model's part of ``posgen run``: load once, evaluate cells, fit the decomposition.

Heavy imports (torch, transformers, lm-eval) live here, away from the CLI module.
"""

from __future__ import annotations

import contextlib
import copy
import gc
import io
import logging
import os
import shutil
from pathlib import Path
from typing import Any

from posgen import __version__
from posgen.compat import evaluation_tracker, patched
from posgen.harness.decomposition.depth_account import AccountSpec, account_tasks
from posgen.harness.decomposition.depth_account import depth_account as account_of
from posgen.harness.decomposition.pipeline import write_decomposition
from posgen.harness.hf_posgen.entry_lm import load_entry_lm
from posgen.harness.launch import Launch
from posgen.harness.run.realised_rows import RowRecorder
from posgen.harness.run.resolve import shared_task_manager
from posgen.lm_eval_plugin import register_all
from posgen.results.folder.config import Cell, ModelEntry, RunConfig
from posgen.results.folder.run_store import RunStore
from posgen.results.folder.store import atomic_write_parquet, slug
from posgen.results.tables.metric_list import Aggregations
from posgen.results.tables.tidy import cell_record

_ENV_INFO: dict[str, Any] = {}
_GIT_HASH: list[Any] = []


@contextlib.contextmanager
def _env_info_once():
    """lm-eval adds torch's environment report and ``git describe`` of the working folder
    to every result (subprocesses each time; git prints "fatal: not a git repository" on
    the terminal outside one). Collect both once per process, git's stderr silenced, and
    reuse them, unchanged."""

    def cached(original):
        def add_env_info(storage: dict[str, Any]) -> None:
            if not _ENV_INFO:
                original(_ENV_INFO)
            storage.update(_ENV_INFO)

        return add_env_info

    def cached_git(original):
        def get_git_commit_hash():
            if not _GIT_HASH:
                with _stderr_fd_to_devnull():
                    _GIT_HASH.append(original())
            return _GIT_HASH[0]

        return get_git_commit_hash

    with (
        patched("lm_eval.evaluator:add_env_info", cached),
        patched("lm_eval.evaluator:get_git_commit_hash", cached_git),
    ):
        yield


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


@contextlib.contextmanager
def _lm_eval_logging_to(stream: Any):
    """lm-eval's log records (INFO and above) into ``stream`` while the block runs.

    lm-eval's own handler (``lm_eval.utils.setup_logging``) binds the ``sys.stderr`` of
    the moment it is made, so it cannot follow a stream that changes per cell: instead one
    handler on the ``lm_eval`` logger writes to the session's log file, and the logger's
    level, handlers and propagation are restored on leaving."""
    logger = logging.getLogger("lm_eval")
    saved = (logger.level, logger.handlers[:], logger.propagate)
    handler = logging.StreamHandler(stream)
    handler.setFormatter(
        logging.Formatter(
            "%(asctime)s %(levelname)-8s [%(name)s:%(lineno)d] %(message)s", "%Y-%m-%d:%H:%M:%S"
        )
    )
    logger.handlers = [handler]
    logger.setLevel(logging.INFO)
    logger.propagate = False
    try:
        yield
    finally:
        logger.handlers, logger.propagate = saved[1], saved[2]
        logger.setLevel(saved[0])


def _save_lm_eval_output(tracker: Any, folder: str, out: dict[str, Any]) -> None:
    """lm-eval's files for one cell in ``folder``, written by its ``EvaluationTracker`` as
    ``lm_eval --output_path FOLDER --log_samples`` writes them. The tracker logs and
    swallows its own write errors: a missing file here raises instead."""
    tracker.output_path = folder
    results = copy.deepcopy({k: v for k, v in out.items() if k != "samples"})
    samples = copy.deepcopy(out["samples"])  # the tracker rewrites samples in place
    tracker.save_results_aggregated(results=results, samples=samples)
    for task in results["configs"]:
        tracker.save_results_samples(task_name=task, samples=samples[task])
    written = sorted(p.name for p in Path(folder).rglob("*.json*"))
    expected = 1 + len(results["configs"])
    if len(written) != expected:
        raise RuntimeError(
            f"lm-eval's EvaluationTracker wrote {written} into {folder}; expected a "
            f"results file and {len(results['configs'])} samples file(s) (see lm_eval.log)"
        )


@contextlib.contextmanager
def _observer_removed(lm: Any):
    """The model's plan observer is unset on leaving, whatever happens."""
    try:
        yield
    finally:
        lm.plan_observer = None


class ModelSession:
    """``with ModelSession(store, config, model) as s: s.evaluate(cell); s.decompose();
    s.depth_account()``.

    Holds one ``HFPosgenLM`` (the model loaded once); each cell switches the model-side
    perturbation with ``set_perturbation`` and runs ``lm_eval.simple_evaluate`` on one
    task. lm-eval's own log and progress bars go to ``raw/<model>/lm_eval.log``.
    """

    def __init__(
        self,
        store: RunStore,
        config: RunConfig,
        model: ModelEntry,
        device: str | None = None,
        launch: Launch | None = None,
    ):
        self.store, self.config, self.model, self.device = store, config, model, device
        self.launch = launch or Launch()  # several processes: rank 0 alone writes
        self.lm: Any = None
        self.task_manager: Any = None
        self._log_stack = contextlib.ExitStack()
        self._log: Any = None  # the log file, open for the session's lifetime

    def __enter__(self) -> ModelSession:
        self._log = self._log_stack.enter_context(self._open_log())
        self._log_stack.enter_context(_lm_eval_logging_to(self._log))
        try:
            return self._load()
        except BaseException:
            self._log_stack.close()
            raise

    def _load(self) -> ModelSession:

        register_all()
        self.task_manager = shared_task_manager(self.config.include_path)
        with self._quiet():
            self.lm = load_entry_lm(
                self.model,
                self.config.batch_size,
                self.config.random_init_seed,
                self.device,
                placement=self._placement_memory,
            )
        if (self.lm.rank, self.lm.world_size) != (self.launch.rank, self.launch.world_size):
            raise RuntimeError(
                f"lm-eval's model is rank {self.lm.rank} of {self.lm.world_size}, the launch "
                f"rank {self.launch.rank} of {self.launch.world_size}: documents would not "
                "be sharded (HFLM did not join the launch)"
            )
        return self

    def __exit__(self, *exc: object) -> None:
        self.lm = None
        gc.collect()
        self._log_stack.close()

    def _placement_memory(self) -> dict[str, Any]:
        """With a device map, lm-eval 0.4.13 (``parallelize=True``) gives transformers a
        ``max_memory`` of the GPUs only, so without GPUs 'auto' puts every weight on disk:
        allow the CPU's memory too (transformers' own order: GPUs, CPU, then disk), and
        offload to a temporary folder in the run folder (removed after the session)
        instead of lm-eval's ``./offload``."""
        from accelerate.utils import get_max_memory

        offload = self.store.root / f".offload-{slug(self.model.label)}.tmp"
        self._log_stack.callback(shutil.rmtree, offload, ignore_errors=True)
        return {"max_cpu_memory": get_max_memory()["cpu"], "offload_folder": str(offload)}

    def _open_log(self):
        """The model's log file, ``raw/<model>/lm_eval.log`` (appended to)."""
        log = self.store.root / "raw" / slug(self.model.label) / "lm_eval.log"
        if self.launch.is_main:
            log.parent.mkdir(parents=True, exist_ok=True)
        else:  # the other ranks of a launch write nothing
            log = Path(os.devnull)
        return open(log, "a", encoding="utf-8", buffering=1)

    @contextlib.contextmanager
    def _quiet(self):
        """stderr (progress bars, warnings) into the model's log file, stdout dropped."""
        with contextlib.redirect_stderr(self._log), contextlib.redirect_stdout(io.StringIO()):
            yield

    def evaluate(self, cell: Cell) -> Path | None:
        """Run one cell through lm-eval and write it (raw results, samples, record); under
        a launch every rank scores its share and rank 0 writes (the others return None)."""
        self.lm.set_perturbation(positions=cell.positions, features=cell.features, seed=cell.seed)
        task = cell.lm_eval_task
        recorder = RowRecorder() if cell.kind in ("position", "feature") else None
        self.lm.plan_observer = recorder
        tracker = evaluation_tracker(None)  # its folder is given when the cell is written
        with self._quiet(), _env_info_once(), _observer_removed(self.lm):
            out = self._simple_evaluate(task, self.config.limits[cell.task], tracker)
        if recorder is not None and self.launch.world_size > 1:  # every rank's rows
            recorder.merge(self.launch.gather(recorder.state()))
        if not self.launch.is_main:
            return None  # lm-eval gathered this rank's documents on rank 0
        if out is None:
            raise RuntimeError(f"lm-eval returned no results for {task} on rank 0")
        # gathered in rank order (lm-eval issue 1401): document order as one process has it
        for rows in out["samples"].values():
            rows.sort(key=lambda s: s["doc_id"])
        return self.store.write_cell(
            self.model.label,
            cell.cell_id,
            self._cell_record(cell, out, recorder),
            lm_eval_output=lambda folder: _save_lm_eval_output(tracker, folder, out),
        )

    def _simple_evaluate(self, task: str, limit: int, tracker: Any) -> dict[str, Any] | None:
        """``lm_eval.simple_evaluate`` of the loaded model on one task, with the run's
        prompt options and seeds, as lm-eval's CLI runs it; every sample logged."""
        import lm_eval

        cfg = self.config
        return lm_eval.simple_evaluate(
            model=self.lm,
            model_args=self._model_args(),
            tasks=[task],
            task_manager=self.task_manager,
            limit=limit,
            num_fewshot=cfg.num_fewshot,
            apply_chat_template=cfg.apply_chat_template,
            # as lm-eval's CLI: few-shot examples as chat turns under a template
            fewshot_as_multiturn=cfg.multiturn(),
            system_instruction=cfg.system_instruction,
            gen_kwargs=dict(cfg.gen_kwargs) if cfg.gen_kwargs else None,
            log_samples=True,
            bootstrap_iters=0,
            evaluation_tracker=tracker,
            random_seed=cfg.seed,
            numpy_random_seed=cfg.seed,
            torch_random_seed=cfg.seed,
            fewshot_random_seed=cfg.seed,
        )

    def _cell_record(
        self, cell: Cell, out: dict[str, Any], recorder: RowRecorder | None
    ) -> dict[str, Any]:
        """The cell's record from lm-eval's output on rank 0 (its split, the model, the
        results and samples, and for a model-side cell the positions as realised)."""
        task_cfg = out["configs"].get(cell.lm_eval_task, {})
        split = task_cfg.get("test_split") or task_cfg.get("validation_split") or "test"
        return cell_record(  # results/ takes plain data: no harness types cross
            {**cell.record(), "split": split},
            self.model.info(),
            out["results"],
            out["samples"],
            __version__,
            seed=self.config.seed,
            model_side=None
            if recorder is None
            else {"realised": recorder.realised(), "rows": recorder.examples(self.lm.tokenizer)},
            configs=out["configs"],
            higher_is_better=out["higher_is_better"],
            aggregations=Aggregations(task_manager=self.task_manager),
        )

    def _model_args(self) -> dict[str, Any]:
        """What lm-eval records as the model's arguments (its output folder is named after
        ``pretrained``), as ``--model_args`` of lm-eval's CLI would give them."""
        m = self.model
        if m.random_init:  # the architecture of ``path``, its weights drawn from the seed
            return {
                "pretrained": m.path,
                "dtype": m.dtype,
                "random_init_seed": self.config.random_init_seed,
            }
        return {"pretrained": m.path, "dtype": m.dtype, **m.load_options()}

    def decompose(self) -> Path:
        """The per-(doc, layer, head) decomposition of the loaded weights."""

        with self._quiet():
            return write_decomposition(
                self.lm,
                self.model,
                self.config.decompose,
                self.config.seed,
                self.store.decomposition_path(self.model.label),
            )

    def depth_account(self) -> tuple[Path, Path]:
        """The decomposition's account of the depth curve of the loaded weights
        (:mod:`posgen.harness.decomposition.depth_account`) on the run's built-in
        log-likelihood depth tasks, written (masses first, values last) per model."""
        cfg = self.config
        spec = depth_account_spec(cfg)
        with self._quiet():
            values, masses = account_of(
                self.lm, spec, self.task_manager, self.model.label, self.model.random_init
            )
        values_path, mass_path = self.store.depth_account_paths(self.model.label)
        atomic_write_parquet(mass_path, masses)
        atomic_write_parquet(values_path, values)
        return values_path, mass_path


def depth_account_spec(cfg: RunConfig) -> AccountSpec:
    """The account's settings from the run's: its built-in log-likelihood depth tasks,
    ``--depth-account`` documents each (at most the run's), the run's prompt and seed."""
    tasks = account_tasks(cfg.depth.tasks if cfg.depth is not None else ())
    prompt = {"num_fewshot": cfg.num_fewshot, "apply_chat_template": cfg.apply_chat_template,
              "fewshot_as_multiturn": cfg.multiturn(),
              "system_instruction": cfg.system_instruction}  # fmt: skip
    docs = {t: min(cfg.depth.account_docs, cfg.limits[t]) for t in tasks}
    return AccountSpec(tasks, docs, seed=cfg.seed, prompt=prompt)
