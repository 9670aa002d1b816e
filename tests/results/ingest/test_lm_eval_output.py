"""Reading lm-eval output folders into cells (unit tier: hand-written lm-eval-shaped
files, no model)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posgen.perturbations import parse
from posgen.results.folder.schema import SchemaError
from posgen.results.ingest.folders import collect

TASK = "posgen_prose"
STAMP = "2026-01-01T00-00-00.000000"


def write_output(root: Path, tasks: list[str], model: str = "hf", **model_args: object) -> Path:
    """An lm-eval output folder: one results file, one samples file per task."""
    folder = root / "model"
    folder.mkdir(parents=True)
    config: dict = {"model": model, "model_args": {"pretrained": "/m", **model_args}}
    if model == "hf-posgen":
        config["posgen"] = {
            "positions": parse("position", "swap:0.5").spec.to_dict()
            if "positions" in model_args
            else None,
            "features": None,
            "perturb_seed": model_args.get("perturb_seed", 1234),
        }
    results = {
        "results": {t: {"alias": t} for t in tasks},
        "configs": {t: {"test_split": "test"} for t in tasks},
        "config": config,
        "lm_eval_version": "0.4.13",
    }
    (folder / f"results_{STAMP}.json").write_text(json.dumps(results))
    for t in tasks:
        rows = [
            {"doc_id": i, "doc": {"doc_id": f"d{i}"}, "word_perplexity": [-10.0 - i, 5]}
            for i in range(3)
        ]
        (folder / f"samples_{t}_{STAMP}.jsonl").write_text(
            "".join(json.dumps(r) + "\n" for r in rows)
        )
    return root


def test_cells_are_recognised_from_task_names_and_hf_posgen_records(tmp_path):
    a = write_output(tmp_path / "a", [TASK, f"perm_swap_5pct_{TASK}", f"perm_shuffle_all_{TASK}"])
    b = write_output(tmp_path / "b", [TASK], "hf-posgen", positions="swap:0.5")
    cells = {c["cell_id"]: c for _, c, _ in collect([a, b])}
    assert set(cells) == {
        f"{TASK}__none",
        f"{TASK}__text_swap_0.05",
        f"{TASK}__text_shuffle_1",
        f"{TASK}__position_swap_0.5",
    }
    assert {c["seed"] for c in cells.values()} == {1234}
    assert cells[f"{TASK}__position_swap_0.5"]["lm_eval_task"] == TASK


def test_a_text_task_under_a_model_side_perturbation_is_refused(tmp_path):
    out = write_output(tmp_path, [f"perm_swap_5pct_{TASK}"], "hf-posgen", positions="swap:0.5")
    with pytest.raises(SchemaError, match="one perturbation per cell"):
        collect([out])


def test_one_model_in_two_dtypes_is_refused(tmp_path):
    a = write_output(tmp_path / "a", [TASK], dtype="float32")
    b = write_output(tmp_path / "b", [f"perm_swap_5pct_{TASK}"], dtype="bfloat16")
    with pytest.raises(SchemaError, match=r"different dtype: 'float32' in .* 'bfloat16' in "):
        collect([a, b])


def test_a_text_seed_other_than_the_model_side_seed_is_refused(tmp_path):
    a = write_output(tmp_path / "a", [TASK, f"perm_swap_5pct_seed7_{TASK}"])
    b = write_output(tmp_path / "b", [TASK], "hf-posgen", positions="swap:0.5")
    with pytest.raises(SchemaError, match=r"mixed perturbation seeds \[7, 1234\]"):
        collect([a, b])
