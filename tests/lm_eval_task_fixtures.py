"""posgen's own lm-eval test tasks (tests/data/lm_eval_tasks/) on local JSON docs, and
lm-eval output of them from tiny models, for the metric tests.

- ``posgen_t_recall`` (generate_until): ``exact_match``, ``ter``, ``chrf`` aggregated by
  the task's own function (``posgen_t_utils.share_identical``) and ``bypass``
  under two filters (``strict-match``, ``flexible-extract``). A tiny random model answers
  nonsense, so the targets are planted: two documents in three get as target what the
  model itself answers unperturbed (as flexible-extract or as strict-match extracts it),
  so the unperturbed cell matches on some documents under each filter and a perturbation
  can break the matches.
- ``posgen_t_yesno`` (multiple_choice): ``acc`` and the corpus metric ``mcc``.
- ``posgen_t_unscored``: ``bypass`` only (nothing posgen can score).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

TASKS_DIR = Path(__file__).parent / "data" / "lm_eval_tasks"
ANIMALS = ["cat", "dog", "bird", "fish", "frog", "cow", "horse", "sheep", "goat", "duck"]
PLACES = ["mat", "park", "house", "lake", "log", "field", "barn", "hill", "road", "pond"]
VERBS = ["sat on", "ran in", "flew over", "swam in", "jumped on", "stood in", "slept in"]
RECALL_DOCS = [
    {
        "id": f"r{i:02d}",
        "question": f"The small {a} {v} the old {p} near the river this morning. Which "
        f"animal {v} the {p}?",
        "answer": a,
    }
    for i, (a, v, p) in enumerate(
        (ANIMALS[i % 10], VERBS[i % 7], PLACES[(3 * i) % 10]) for i in range(12)
    )
]
YESNO_DOCS = [
    {
        "id": f"y{i:02d}",
        "question": f"The small {ANIMALS[i % 10]} {VERBS[i % 7]} the old {PLACES[(7 * i) % 10]} "
        "near the river this morning. Which animal was it?",
        "choices": [ANIMALS[(i + 3 * (i % 2)) % 10], ANIMALS[(i + 3 * (1 - i % 2)) % 10]],
        "label": i % 2,
    }
    for i in range(16)
]
# per document (i mod 3): the filter whose unperturbed answer becomes its target, or None
PLANT = ("flexible-extract", "strict-match", None)
FIELDS = {"posgen_fields": {"posgen_t_recall": ["question"], "posgen_t_yesno": ["question"]}}


def write_jsonl(path: Path, rows: list[dict[str, Any]]) -> None:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")


def task_folder(root: Path, model_dir: Path | None = None) -> Path:
    """``root/tasks``: the test task YAMLs reading their docs from ``root/data``; with
    ``model_dir``, the recall targets planted from that model's unperturbed answers."""
    tasks, data = Path(root) / "tasks", Path(root) / "data"
    tasks.mkdir(parents=True, exist_ok=True)
    data.mkdir(parents=True, exist_ok=True)
    for source in [*TASKS_DIR.glob("*.yaml"), *TASKS_DIR.glob("*.py")]:
        text = source.read_text(encoding="utf-8").replace("DATA_DIR", str(data))
        (tasks / source.name).write_text(text, encoding="utf-8")
    write_jsonl(data / "yesno.jsonl", YESNO_DOCS)
    write_jsonl(data / "recall.jsonl", RECALL_DOCS)
    if model_dir is not None:
        out = evaluate(model_dir, "posgen_t_recall", tasks)
        answers = {
            (s["filter"], s["doc"]["id"]): s["filtered_resps"][0]
            for s in out["samples"]["posgen_t_recall"]
        }
        planted = [
            {**d, "answer": answers[(PLANT[i % 3], d["id"])]} if PLANT[i % 3] else d
            for i, d in enumerate(RECALL_DOCS)
        ]
        write_jsonl(data / "recall.jsonl", planted)
    return tasks


def evaluate(
    model_dir: Path, task: str, include_path: Path, model: str = "hf", **model_args: Any
) -> dict[str, Any]:
    """``lm_eval.simple_evaluate`` of one task (samples logged) on a local model."""
    import lm_eval

    from posgen.lm_eval_plugin import register_all
    from posgen.tasks.lm_eval_tasks import task_manager

    register_all()
    if str(include_path) not in _MANAGERS:  # indexing lm-eval's task YAMLs takes seconds
        _MANAGERS[str(include_path)] = task_manager(include_path=str(include_path), metadata=FIELDS)
    args = ",".join(f"{k}={v}" for k, v in {"pretrained": model_dir, **model_args}.items())
    return lm_eval.simple_evaluate(
        model=model,
        model_args=f"{args},device=cpu,batch_size=4",
        tasks=[task],
        task_manager=_MANAGERS[str(include_path)],
        log_samples=True,
        bootstrap_iters=0,
    )


_MANAGERS: dict[str, Any] = {}


def lm_eval_folder(out: dict[str, Any], folder: Path) -> Path:
    """Write ``simple_evaluate``'s output as ``lm_eval --output_path FOLDER --log_samples``
    does (lm-eval's own EvaluationTracker)."""
    import copy

    from posgen.compat import evaluation_tracker

    tracker = evaluation_tracker(str(folder))
    tracker.general_config_tracker.log_experiment_args(
        model_source=out["config"]["model"],
        model_args=out["config"]["model_args"],
        system_instruction=None,
        chat_template=None,
        fewshot_as_multiturn=False,
    )
    results = copy.deepcopy({k: v for k, v in out.items() if k != "samples"})
    tracker.save_results_aggregated(results=results, samples=out["samples"])
    for task, samples in out["samples"].items():
        tracker.save_results_samples(task_name=task, samples=copy.deepcopy(samples))
    return folder
