"""``posgen tasks`` (unit tier, except ``write``, which reads lm-eval's task index)."""

from __future__ import annotations

import subprocess
import sys
from collections import Counter

import pytest

from hub_fixtures import HELLASWAG_DOCS
from posgen.harness.cli import main


def test_list_shows_the_family_and_the_grammar(capsys) -> None:
    assert main(["tasks", "list"]) == 0
    out = capsys.readouterr().out
    assert "perm_swap_5pct" in out and "posgen_cloze   acc" in out and "0p5pct" in out
    assert "posgen_recall  exact_match" in out


def test_name(capsys) -> None:
    assert main(["tasks", "name", "hellaswag", "--rate", "0.005", "--seed", "7"]) == 0
    assert capsys.readouterr().out.strip() == "perm_swap_0p5pct_seed7_hellaswag"
    assert main(["tasks", "name", "piqa", "--scheme", "local_shuffle", "--window", "4"]) == 0
    assert capsys.readouterr().out.strip() == "perm_local_shuffle_w4_piqa"
    assert main(["tasks", "name", "posgen_kv", "--scheme", "depth", "--depth", "0.25"]) == 0
    assert capsys.readouterr().out.strip() == "perm_depth_25pct_posgen_kv"


_CHILD = """
import sys
from posgen.harness.cli import main
try:
    main(["tasks", "write", "hellaswag", "--rate", "1.5"])
except SystemExit as exc:
    print(exc)
print(sorted(m for m in ("lm_eval", "posgen.tasks.lm_eval_tasks") if m in sys.modules))
"""


def test_bad_input_is_refused_before_anything_loads() -> None:
    proc = subprocess.run([sys.executable, "-c", _CHILD], capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr
    message, loaded = proc.stdout.splitlines()[-2:]
    assert message == (
        "posgen tasks: swap: rate must be a number in [0, 1], got 1.5. "
        "Accepted text forms: adjacent:RATE, depth:DEPTH, local_shuffle:WINDOW, shuffle, "
        "swap:RATE"
    )
    assert loaded == "[]"
    with pytest.raises(SystemExit, match="needs --rate"):
        main(["tasks", "name", "hellaswag", "--scheme", "adjacent"])


def test_write_gives_a_config_lm_eval_runs(
    posgen_tm, local_data, tmp_path, monkeypatch, capsys
) -> None:
    from lm_eval.tasks._yaml_loader import load_yaml

    import posgen.tasks.lm_eval_tasks as lm_eval_tasks

    monkeypatch.setattr(lm_eval_tasks, "task_manager", lambda: posgen_tm)
    assert (
        main(
            [
                "tasks",
                "write",
                "hellaswag",
                "--scheme",
                "shuffle",
                "--fields",
                "query",
                "--seed",
                "3",
                "--output-dir",
                str(tmp_path),
            ]
        )
        == 0
    )
    path = tmp_path / "perm_shuffle_all_seed3_hellaswag.yaml"
    out = capsys.readouterr().out
    assert str(path) in out and "hellaswag: content field query, as chosen with --fields" in out
    cfg = {**load_yaml(path, resolve_func=True), **local_data["hellaswag"]}
    assert cfg["tag"] == [] and cfg["process_docs"].__module__.endswith("hellaswag.utils")
    task = posgen_tm.load([cfg])["tasks"]["perm_shuffle_all_seed3_hellaswag"]
    base = posgen_tm.load([posgen_tm.task_config("hellaswag", local_data["hellaswag"])])
    base_docs = base["tasks"]["hellaswag"].eval_docs
    for doc, orig in zip(task.eval_docs, base_docs, strict=True):
        assert doc["query"] != orig["query"]
        assert Counter(doc["query"].split()) == Counter(orig["query"].split())
    assert len(task.eval_docs) == len(HELLASWAG_DOCS)
    assert task.config.metadata["posgen"]["fields"] == [{"name": "query"}]
    with pytest.raises(SystemExit, match="posgen does not know which doc fields"):
        main(["tasks", "write", "prost", "--rate", "0.1", "--output-dir", str(tmp_path)])


def test_fields_says_how_each_task_s_fields_were_decided(tmp_path, monkeypatch, capsys) -> None:
    import posgen.tasks.lm_eval_tasks as lm_eval_tasks

    (tmp_path / "mine.yaml").write_text(
        "task: mine\ndataset_path: json\ntest_split: test\noutput_type: generate_until\n"
        'doc_to_text: "Story: {{story}}\\nAnswer:"\ndoc_to_target: "{{answer}}"\n'
    )
    seen = []

    def only_included(include_path=None, metadata=None):  # no lm-eval index: seconds
        seen.append(include_path)
        return lm_eval_tasks.PosgenTaskManager(include_path=include_path, include_defaults=False)

    monkeypatch.setattr(lm_eval_tasks, "task_manager", only_included)
    assert main(["tasks", "fields", "mine", "posgen_cloze", "--include-path", str(tmp_path)]) == 0
    assert capsys.readouterr().out.splitlines() == [
        "mine: content field story, inferred: the one field its doc_to_text reads that "
        "neither its target nor its choices read",
        "posgen_cloze: content field context (posgen's table)",
    ]
    assert seen == [[str(tmp_path)]]
    assert main(["tasks", "fields", "nosuch", "--include-path", str(tmp_path)]) == 2
    assert "'nosuch' is not a single lm-eval task" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exit_info:
        main(["tasks", "fields", "mine", "--include-path", str(tmp_path / "absent")])
    assert exit_info.value.code == 2 and len(seen) == 2  # refused before any index
    assert "no such folder" in capsys.readouterr().err


def test_write_leaves_the_whole_file_and_nothing_beside_it(tmp_path, monkeypatch, capsys) -> None:
    """The YAML goes through posgen.atomic: the file holds the whole config (its last key
    included) and no temporary file is left in the output folder."""
    import yaml

    import posgen.tasks.lm_eval_tasks as lm_eval_tasks

    tasks, out = tmp_path / "tasks", tmp_path / "out"
    tasks.mkdir()
    (tasks / "mine.yaml").write_text(
        "task: mine\ndataset_path: json\ntest_split: test\noutput_type: generate_until\n"
        'doc_to_text: "Story: {{story}}\\nAnswer:"\ndoc_to_target: "{{answer}}"\n'
    )

    def only_included(include_path=None, metadata=None):  # no lm-eval index: seconds
        return lm_eval_tasks.PosgenTaskManager(include_path=include_path, include_defaults=False)

    monkeypatch.setattr(lm_eval_tasks, "task_manager", only_included)
    argv = ["tasks", "write", "mine", "--rate", "0.5", "--include-path", str(tasks)]
    assert main([*argv, "--output-dir", str(out)]) == 0
    (path,) = out.iterdir()
    assert path.name == "perm_swap_50pct_mine.yaml"
    text = path.read_text()
    assert text.endswith("\n")
    cfg = yaml.load(text, Loader=yaml.BaseLoader)  # the !function tag kept as text
    assert cfg["include"] == str((tasks / "mine.yaml").resolve())
    assert cfg["task"] == "perm_swap_50pct_mine"
    assert cfg["posgen_perturbation"]["fields"] == [{"name": "story"}]


def test_write_of_an_evidence_depth_includes_the_tasks_yaml(tmp_path, monkeypatch, capsys) -> None:
    """A task of one's own that declares its passages (docs/depth.md): the written config
    moves its evidence; one without the declaration is refused with what to add."""
    import json

    import posgen.tasks.lm_eval_tasks as lm_eval_tasks
    from posgen.tasks.family import yaml_text

    tasks, out = tmp_path / "tasks", tmp_path / "out"
    tasks.mkdir()
    data = tasks / "mine.jsonl"
    data.write_text(json.dumps({"docs": ["a.", "b.", "c."], "gold": 0, "q": "q?"}) + "\n")
    base = {
        "task": "mine",
        "dataset_path": "json",
        "dataset_kwargs": {"data_files": {"test": str(data)}},
        "test_split": "test",
        "output_type": "generate_until",
        "doc_to_text": "{{docs|join(' ')}} {{q}}",
        "doc_to_target": "x",
        "generation_kwargs": {"until": ["."]},
        "metadata": {"posgen_depth": {"passages": "docs", "evidence": "gold", "question": "q"}},
    }
    (tasks / "mine.yaml").write_text(yaml_text(base))
    (tasks / "plain.yaml").write_text(yaml_text({**base, "task": "plain", "metadata": {}}))
    managers = []

    def only_included(include_path=None, metadata=None):  # no lm-eval index: seconds
        managers.append(
            lm_eval_tasks.PosgenTaskManager(include_path=include_path, include_defaults=False)
        )
        return managers[-1]

    monkeypatch.setattr(lm_eval_tasks, "task_manager", only_included)
    argv = ["tasks", "write", "mine", "--scheme", "depth", "--depth", "1", "--output-dir", str(out)]
    assert main([*argv, "--include-path", str(tasks)]) == 0
    (path,) = out.iterdir()
    assert path.name == "perm_depth_100pct_mine.yaml"
    (task,) = managers[-1].load([str(path)])["tasks"].values()
    assert task.eval_docs[0]["docs"] == ["b.", "c.", "a."] and task.eval_docs[0]["gold"] == 2
    with pytest.raises(SystemExit, match="'plain' does not say which of its doc fields"):
        main(
            [
                "tasks",
                "write",
                "plain",
                "--scheme",
                "depth",
                "--depth",
                "1",
                "--include-path",
                str(tasks),
            ]
        )
