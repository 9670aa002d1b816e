"""Shared fixtures: tiny local models (seconds), the embedded model (slow tier), one posgen
TaskManager per session, and local JSON docs shaped like the hub datasets of HellaSwag and
ARC, which tests load in place of the unreachable hub."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
if os.environ.get("PYTEST_XDIST_WORKER"):
    # one thread per worker (and per process a test starts): pytest-xdist runs a worker
    # per core, and torch's own threads on top of them only contend
    os.environ["OMP_NUM_THREADS"] = os.environ["MKL_NUM_THREADS"] = "1"

from hub_fixtures import ARC_DOCS, HELLASWAG_DOCS
from tiny_models import CHAT_TEMPLATE, SHORT_TABLE, save_short_context, save_tiny


def pytest_configure(config):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        import torch  # imported already by a plugin, the environment above came too late

        torch.set_num_threads(1)


def pytest_collection_modifyitems(config, items):
    """Under pytest-xdist, the tests marked ``long`` open the workers' queues, one per
    worker in turn: the worksteal scheduler hands worker k the k-th of equal slices of the
    collection and steals from the ends of queues, so a test of minutes met late in one
    queue would end the run alone. Without workers the order is left as collected."""
    workers = int(getattr(config, "workerinput", {}).get("workercount", 0))
    long = [item for item in items if item.get_closest_marker("long")]
    if workers < 2 or not long:
        return
    rest = [item for item in items if not item.get_closest_marker("long")]
    sizes, left = [], len(items)
    for k in range(workers):  # the scheduler's first split: len(pending) // nodes remaining
        sizes.append(left // (workers - k))
        left -= sizes[-1]
    ordered = []
    for k, size in enumerate(sizes):
        first = long[k::workers]
        ordered += first + [rest.pop(0) for _ in range(max(size - len(first), 0)) if rest]
    items[:] = ordered + rest


@pytest.fixture(scope="session", autouse=True)
def _model_digest_cache(tmp_path_factory):
    """Model files' digests (posgen.harness.loading.identity) cached in the session's own
    folder, not in the user's posgen cache."""
    from posgen.harness.loading import identity

    path = tmp_path_factory.mktemp("digests") / identity.CACHE_FILE
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(identity, "cache_path", lambda: path)
        yield path


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """``tiny_model_dir(arch="llama", seed=0) -> Path``: a saved tiny model + tokenizer."""
    made: dict[tuple[str, int], Path] = {}

    def make(arch: str = "llama", seed: int = 0) -> Path:
        if (arch, seed) not in made:
            made[(arch, seed)] = save_tiny(
                tmp_path_factory.mktemp(f"tiny-{arch}-{seed}"), arch, seed
            )
        return made[(arch, seed)]

    return make


@pytest.fixture(scope="session")
def short_table_dir(tmp_path_factory):
    """``short_table_dir(arch) -> Path``: a saved tiny model whose positions end at
    :data:`SHORT_TABLE` (GPT-2's ``n_positions``, OPT's ``max_position_embeddings``, MPT's
    ``max_seq_len``), shorter than the commands' default windows."""
    made: dict[str, Path] = {}

    def make(arch: str) -> Path:
        if arch not in made:
            folder = tmp_path_factory.mktemp(f"short-{arch}") / arch
            made[arch] = save_short_context(folder, arch, SHORT_TABLE)
        return made[arch]

    return make


@pytest.fixture(scope="session")
def chat_model(tiny_model_dir, tmp_path_factory) -> Path:
    """The tiny Llama with a chat template (``tiny_models.CHAT_TEMPLATE``) in its tokenizer."""
    import shutil

    from transformers import AutoTokenizer

    path = tmp_path_factory.mktemp("chat") / "tiny-chat"
    shutil.copytree(tiny_model_dir("llama", 0), path)
    tok = AutoTokenizer.from_pretrained(path)
    tok.chat_template = CHAT_TEMPLATE
    tok.save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def positional_model_dir(tmp_path_factory) -> Path:
    """:func:`planted_models.positional_llama` saved with the tiny tokenizer: 4 layers,
    only layer ``POSITIONAL_LAYER`` position-dependent (``posgen layers`` and ``posgen
    cause`` end to end)."""
    from planted_models import POSITIONAL_LAYER, positional_llama
    from tiny_models import build_tokenizer

    path = tmp_path_factory.mktemp("positional") / "model"
    positional_llama(4, POSITIONAL_LAYER).save_pretrained(path)
    build_tokenizer().save_pretrained(path)
    return path


@pytest.fixture(scope="session")
def embedded_model_dir() -> Path:
    """The embedded SmolLM2-135M as a plain Hugging Face folder (converted once)."""
    from posgen.harness.embedded import embedded_model_path

    return embedded_model_path()


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


@pytest.fixture(scope="session")
def posgen_tm():
    """A PosgenTaskManager (includes the offline suite and resolves perturbed names)."""
    from posgen.tasks.lm_eval_tasks import task_manager

    return task_manager()


@pytest.fixture(scope="session")
def local_data(tmp_path_factory) -> dict[str, dict[str, Any]]:
    """lm-eval config overrides that load HellaSwag- and ARC-shaped docs from local JSON."""
    root = tmp_path_factory.mktemp("hub-fixtures")
    hs = write_jsonl(root / "hellaswag.jsonl", HELLASWAG_DOCS)
    arc = write_jsonl(root / "arc.jsonl", ARC_DOCS)
    return {
        "hellaswag": {
            "dataset_path": "json",
            "dataset_name": None,
            "dataset_kwargs": {"data_files": {"train": hs, "validation": hs}},
        },
        "arc_easy": {
            "dataset_path": "json",
            "dataset_name": None,
            "dataset_kwargs": {"data_files": {"train": arc, "validation": arc, "test": arc}},
        },
    }


@pytest.fixture(scope="session")
def hellaswag_requests(posgen_tm, local_data) -> list:
    """The loglikelihood requests (lm-eval ``Instance``s) of lm-eval's own HellaSwag task
    on local docs."""
    name = "hellaswag"
    task = posgen_tm.load([posgen_tm.task_config(name, local_data[name])])["tasks"][name]
    task.build_all_requests(rank=0, world_size=1)
    return list(task.instances)
