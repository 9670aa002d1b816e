"""The settings that change what is scored (posgen.results.ingest.scored_settings) must be
the same across the ingested cells of a model: each row of the table, changed in one
output, is refused in one line naming it and both results files; settings that place
the work (batch size, device) and the perturbation's own arguments may differ (unit
tier: lm-eval-shaped files as lm-eval 0.4.13 writes them, no model)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from posgen.perturbations import parse
from posgen.results.folder.schema import SchemaError
from posgen.results.ingest.folders import collect
from posgen.results.ingest.scored_settings import NOT_SCORED, SCORED

TASK = "posgen_prose"
STAMP = "2026-01-01T00-00-00.000000"
TASK_CONFIG = {
    "task": TASK,
    "test_split": "test",
    "doc_to_text": "",
    "doc_to_target": "{{text}}",
    "target_delimiter": " ",
    "fewshot_delimiter": "\n\n",
    "num_fewshot": 0,
    "metric_list": [{"metric": "word_perplexity", "aggregation": "weighted_perplexity"}],
    "output_type": "loglikelihood_rolling",
    "metadata": {"version": 2, "config_source": "inline"},
}


def results(model: str, **model_args: object) -> dict:
    """A results file's content, with every key lm-eval 0.4.13 records."""
    config = {
        "model": model,
        "model_args": {"pretrained": "/m", "dtype": "float32", **model_args},
        "model_num_parameters": 123200,
        "model_dtype": "torch.float32",
        "model_revision": "main",
        "model_sha": "",
        "batch_size": "8",
        "batch_sizes": [],
        "device": "cpu",
        "limit": 3.0,
        "gen_kwargs": {},
        "random_seed": 0,
        "numpy_seed": 1234,
        "torch_seed": 1234,
        "fewshot_seed": 1234,
    }
    if model == "hf-posgen":
        spec = parse("position", "swap:0.5").spec.to_dict() if "positions" in model_args else None
        config["posgen"] = {"positions": spec, "features": None, "perturb_seed": 1234}
    metadata = {**TASK_CONFIG["metadata"], **config["model_args"]}  # as lm_eval's CLI puts it
    return {
        "results": {TASK: {"alias": TASK}},
        "configs": {TASK: {**copy.deepcopy(TASK_CONFIG), "metadata": metadata}},
        "config": config,
        "n-shot": {TASK: 0},
        "lm_eval_version": "0.4.13",
        "tokenizer_pad_token": ["<pad>", "0"],
        "tokenizer_eos_token": ["</s>", "2"],
        "tokenizer_bos_token": ["<s>", "1"],
        "eot_token_id": 2,
        "max_length": 2048,
        "system_instruction": None,
        "system_instruction_sha": None,
        "fewshot_as_multiturn": None,
        "chat_template": None,
        "chat_template_sha": None,
    }


def write(root: Path, data: dict) -> Path:
    folder = root / "model"
    folder.mkdir(parents=True)
    (folder / f"results_{STAMP}.json").write_text(json.dumps(data))
    rows = [
        {"doc_id": i, "doc": {"doc_id": f"d{i}"}, "word_perplexity": [-10.0, 5]} for i in range(3)
    ]
    (folder / f"samples_{TASK}_{STAMP}.jsonl").write_text(
        "".join(json.dumps(r) + "\n" for r in rows)
    )
    return root


def pair(tmp_path: Path, edit=None) -> list[Path]:
    """A baseline (plain ``hf``) and a position cell (``hf-posgen``) of one model and task,
    ``edit(baseline, cell)`` applied to their results first."""
    base = results("hf")
    cell = results("hf-posgen", positions="swap:0.5", perturb_seed=1234)
    if edit is not None:
        edit(base, cell)
    return [write(tmp_path / "base", base), write(tmp_path / "cell", cell)]


def _args(**kv):
    return lambda a, b: b["config"]["model_args"].update(kv)


def _top(**kv):
    return lambda a, b: b.update(kv)


def _config(**kv):
    return lambda a, b: b["config"].update(kv)


def _both(edit_a, edit_b):
    def edit(a, b):
        edit_a(a)
        edit_b(b)

    return edit


def _model(path: str, revision: str):
    return lambda r: r["config"].update(posgen_model={"path": path, "revision": revision})


def _chat(template: str, multiturn: bool):
    return lambda r: r.update(chat_template=template, chat_template_sha=f"sha-{template}",
                              fewshot_as_multiturn=multiturn)  # fmt: skip


def _shots(n: int, seed: int):
    def edit(r):
        r["n-shot"][TASK] = n
        r["config"]["fewshot_seed"] = seed

    return edit


def _generation(kwargs: dict):
    return lambda r: r["configs"][TASK].update(
        output_type="generate_until", generation_kwargs=kwargs
    )


# one edit per row of SCORED: the setting changed in the perturbed cell's output only
EDITS = {
    "pretrained path": _both(_model("/m", "local-content:1"), _model("/elsewhere/m", "local-content:1")),
    "model content": _both(_model("/m", "local-content:1"), _model("/m", "local-content:2")),
    "model_num_parameters": _config(model_num_parameters=999),
    "revision": _args(revision="v2"),
    "dtype": _config(model_dtype="torch.bfloat16"),
    "max_length": lambda a, b: (_top(max_length=64)(a, b), _args(max_length=64)(a, b)),
    "tokenizer": _args(tokenizer="/other-tokenizer"),
    "special tokens": _top(tokenizer_bos_token=["<bos>", "5"]),
    "add_bos_token": _args(add_bos_token=True),
    "prefix_token_id": _args(prefix_token_id=7),
    "trust_remote_code": _args(trust_remote_code="true"),
    "use_fast_tokenizer": _args(use_fast_tokenizer=False),
    "truncation": _args(truncation=True),
    "softmax_dtype": _args(softmax_dtype="float64"),
    "mixed_precision_dtype": _args(mixed_precision_dtype="bfloat16"),
    "attn_implementation": _args(attn_implementation="eager"),
    "backend": _args(backend="seq2seq"),
    "subfolder": _args(subfolder="step-1000"),
    "peft": _args(peft="/adapter"),
    "delta": _args(delta="/delta"),
    "gguf_file": _args(gguf_file="m.gguf"),
    "autogptq": _args(autogptq=True),
    "gptqmodel": _args(gptqmodel=True),
    "think_end_token": _args(think_end_token="</think>"),
    "enable_thinking": _args(enable_thinking=True),
    "chat_template_args": _args(chat_template_args='{"x": 1}'),
    "chat template": _both(_chat("t1", True), _chat("t2", True)),
    "fewshot_as_multiturn": _both(_chat("t", True), _chat("t", False)),
    "system_instruction": _top(system_instruction="Be brief.", system_instruction_sha="s"),
    "num_fewshot": lambda a, b: b["n-shot"].update({TASK: 5}),
    "fewshot_seed": _both(_shots(5, 1234), _shots(5, 7)),
    "generation_kwargs": _both(_generation({"max_gen_toks": 256}), _generation({"max_gen_toks": 16})),
    "limit": _config(limit=10),
    "task definition": lambda a, b: b["configs"][TASK].update(doc_to_text="Q: {{text}}"),
}  # fmt: skip


def test_every_row_of_the_table_has_its_test():
    assert sorted(EDITS) == sorted(s.name for s in SCORED)
    assert all(s.reason and s.scope in ("model", "task", "lm_eval_task") for s in SCORED)


@pytest.mark.parametrize("name", sorted(EDITS))
def test_a_setting_that_changes_what_is_scored_is_refused_in_one_line(name, tmp_path):
    dirs = pair(tmp_path, EDITS[name])
    with pytest.raises(SchemaError) as refused:
        collect(dirs)
    message = str(refused.value)
    assert f"the cells were run with different {name}: " in message and "\n" not in message
    base, cell = (next(d.rglob("results_*.json")) for d in dirs)
    assert str(base) in message and str(cell) in message


def test_the_max_length_refusal_shows_both_windows(tmp_path):
    with pytest.raises(SchemaError) as refused:
        collect(pair(tmp_path, EDITS["max_length"]))
    assert "different max_length: 2048 in " in str(refused.value)
    assert ", 64 in " in str(refused.value) and "the window each document" in str(refused.value)


def test_alike_outputs_pass_and_placement_and_the_perturbation_may_differ(tmp_path):
    """batch size, device, the seeds that draw nothing here and hf-posgen's own arguments
    differ; a record only one output has (hf-posgen's model path) is not compared."""

    def edit(a, b):
        a["config"].update(batch_size="auto", batch_sizes=[64], device="cuda:0", random_seed=3)
        b["config"]["model_args"].update(batch_size=1, device="cpu", max_batch_size=4)
        b["config"]["model_args"].update(parallelize=True, device_map="auto", logits_cache=False)
        b["config"].update(posgen_model={"path": "/m", "revision": "local-content:1"})
        b["config"].update(fewshot_seed=99)  # no few-shot examples: nothing drawn

    cells = {c["cell_id"] for _, c, _ in collect(pair(tmp_path, edit))}
    assert cells == {f"{TASK}__none", f"{TASK}__position_swap_0.5"}
    assert {"batch_size", "device", "logits_cache"} <= set(NOT_SCORED)


def test_the_same_value_written_two_ways_is_the_same(tmp_path):
    """lm-eval records what its CLI parsed (``64``) or a dict as given (``"64"``)."""

    def edit(a, b):
        a["config"]["model_args"].update(max_length="64", add_bos_token="True")
        b["config"]["model_args"].update(max_length=64, add_bos_token=True)
        a["config"]["limit"], b["config"]["limit"] = 3, 3.0
        a["max_length"] = b["max_length"] = 64

    assert len(collect(pair(tmp_path, edit))) == 2


def test_a_model_argument_posgen_does_not_know_is_compared(tmp_path):
    with pytest.raises(SchemaError, match=r"different rope_theta: .*posgen does not know"):
        collect(pair(tmp_path, _args(rope_theta=20000)))


def test_a_text_cell_and_its_baseline_pair_under_task_scope(tmp_path):
    """A text cell runs another lm-eval task (perm_..._T): its task definition is its own,
    but the few-shot count is compared with its baseline's (the same task T)."""
    base = results("hf")
    text = results("hf")
    name = f"perm_swap_5pct_{TASK}"
    for key in ("results", "configs", "n-shot"):
        text[key] = {name: text[key].pop(TASK)}
    text["configs"][name]["doc_to_text"] = "perturbed task, its own definition"
    dirs = [write(tmp_path / "base", base)]
    folder = tmp_path / "text" / "model"
    folder.mkdir(parents=True)
    (folder / f"results_{STAMP}.json").write_text(json.dumps(text))
    rows = [{"doc_id": 0, "doc": {"doc_id": "d0"}, "word_perplexity": [-10.0, 5]}]
    (folder / f"samples_{name}_{STAMP}.jsonl").write_text(json.dumps(rows[0]) + "\n")
    dirs.append(tmp_path / "text")
    assert len(collect(dirs)) == 2
    text["n-shot"][name] = 3
    (folder / f"results_{STAMP}.json").write_text(json.dumps(text))
    with pytest.raises(SchemaError, match=r"different num_fewshot: 0 in .* 3 in "):
        collect(dirs)
