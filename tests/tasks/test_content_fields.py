"""How posgen decides a task's content fields: named, known, inferred, or a message that
names the fields the prompt reads (unit tier, then a user's own task YAML through a task
manager that indexes only its folder)."""

from __future__ import annotations

import json
import logging
import textwrap
from collections import Counter
from pathlib import Path

import pytest

from posgen.tasks.content_fields import (
    FieldChoice,
    FieldSpec,
    UnknownContentFields,
    choose_fields,
    resolve_fields,
)

PROMPTED = {
    "output_type": "generate_until",
    "doc_to_text": "Question: {{question}}\\nAnswer:",
    "doc_to_target": "{{label}}",
}


def _message(config: dict, **kw) -> str:
    with pytest.raises(UnknownContentFields) as info:
        resolve_fields("mytask", config, **kw)
    return str(info.value)


def test_a_rolling_loglikelihood_task_names_its_doc_to_target_fields() -> None:
    rolling = {
        "output_type": "loglikelihood_rolling",
        "doc_to_text": "",
        "doc_to_target": "{{page}}",
    }
    message = _message(rolling)
    assert "Its doc_to_target reads: page." in message
    assert '{"posgen_fields": {"mytask": ["page"]}}' in message
    bare = _message({**rolling, "doc_to_target": "text"})
    assert "Its doc_to_target reads: text." in bare


def test_one_field_besides_target_and_choices_is_inferred_and_says_so() -> None:
    choice = choose_fields("mytask", PROMPTED)
    assert choice == FieldChoice("mytask", (FieldSpec("question"),), "inferred", "doc_to_text")
    assert choice.describe() == (
        "mytask: content field question, inferred: the one field its doc_to_text reads "
        "that neither its target nor its choices read"
    )
    assert choice.to_dict() == {
        "fields": [{"name": "question"}],
        "how": "inferred",
        "source": "doc_to_text",
    }
    # a field the choices also read is not content: the one left is inferred
    mc = {**PROMPTED, "doc_to_text": "{{sentence}} {{option}}", "doc_to_choice": "{{[option]}}"}
    assert choose_fields("mytask", mc).fields == (FieldSpec("sentence"),)


def test_two_fields_keep_the_message() -> None:
    two = {**PROMPTED, "doc_to_text": "{{passage}}\\nQuestion: {{question}}"}
    message = _message(two)
    assert "Its doc_to_text reads: passage, question." in message
    assert "it reads 2 fields (passage, question), so posgen cannot tell" in message
    assert '{"posgen_fields": {"mytask": ["passage", "question"]}}' in message
    # MMLU-like: the template lists the answer options, which are a second field
    mmlu = {**PROMPTED, "doc_to_text": "{{question}}\\nA. {{choices[0]}}", "doc_to_choice": ["A"]}
    assert "choices, question" in _message(mmlu)


def _opaque(doc):
    return str(doc)


def _one(doc):
    return doc["question"].strip()


def test_a_function_is_inferred_only_when_all_its_reads_are_visible() -> None:
    assert choose_fields("mytask", {**PROMPTED, "doc_to_text": _one}).how == "inferred"
    message = _message({**PROMPTED, "doc_to_text": _opaque})
    assert "reads: none found (and maybe more" in message
    # the target might read the one field too: not inferred either
    assert "reads: question." in _message(
        {**PROMPTED, "doc_to_text": _one, "doc_to_target": _opaque}
    )


def test_the_table_and_the_user_come_first() -> None:
    known = choose_fields("mmlu_anatomy", PROMPTED, ancestors=["mmlu_stem_tasks", "mmlu"])
    assert (known.how, known.source, known.fields) == ("known", "mmlu", (FieldSpec("question"),))
    named = choose_fields("mytask", PROMPTED, override=["a", "b"])
    assert (named.how, named.source) == ("metadata", "--metadata posgen_fields")
    assert named.fields == (FieldSpec("a"), FieldSpec("b"))
    refused = _message(PROMPTED, ancestors=["cola"])
    assert "does not perturb task 'mytask' (as every task under 'cola')" in refused
    with pytest.raises(ValueError, match="how must be one of"):
        FieldChoice("t", (), "guessed", "")


# ---------------------------------------------------------------- a user's own task YAML

DOCS = [
    {"id": f"d{i}", "passage": text, "question": "Who?", "answer": "x"}
    for i, text in enumerate(
        [
            "the old miller walked down to the river every morning before the sun rose",
            "a small boat drifted past the mill while the children counted the ducks",
            "by noon the village square was full of traders selling apples and cloth",
        ]
    )
]


def _write_task(folder: Path, name: str, doc_to_text: str, extra: str = "") -> None:
    data = folder / "docs.jsonl"
    data.write_text("".join(json.dumps(d) + "\n" for d in DOCS), encoding="utf-8")
    (folder / f"{name}.yaml").write_text(
        textwrap.dedent(
            f"""
            task: {name}
            dataset_path: json
            dataset_kwargs:
              data_files:
                test: {data}
            test_split: test
            output_type: generate_until
            doc_to_text: "{doc_to_text}"
            doc_to_target: "{{{{answer}}}}"
            generation_kwargs:
              until: ["\\n"]
            metric_list:
              - metric: exact_match
            {extra}
            """
        ),
        encoding="utf-8",
    )


@pytest.fixture(scope="module")
def user_tm(tmp_path_factory):
    """A posgen task manager over a folder of the user's own YAML only (seconds)."""
    from posgen.tasks.lm_eval_tasks import PosgenTaskManager

    folder = tmp_path_factory.mktemp("user-tasks")
    _write_task(folder, "onefield", "Passage: {{passage}}\\nAnswer:")
    _write_task(folder, "twofields", "{{passage}}\\nQ: {{question}}\\nA:")
    gsm8k_yaml = Path(__import__("lm_eval").__file__).parent / "tasks" / "gsm8k" / "gsm8k.yaml"
    (folder / "my_gsm8k.yaml").write_text(f"include: {gsm8k_yaml}\ntask: my_gsm8k\n")
    (folder / "other_gsm8k.yaml").write_text(
        f"include: {gsm8k_yaml}\ntask: other_gsm8k\ndoc_to_text: '{{{{problem}}}}'\n"
    )
    return PosgenTaskManager(include_path=str(folder), include_defaults=False)


def test_a_user_task_with_one_content_field_is_inferred_and_reported(
    user_tm, caplog, monkeypatch
) -> None:
    from posgen.tasks import lm_eval_tasks

    monkeypatch.setattr(lm_eval_tasks, "_NOTED", set())  # nothing noted yet in this process
    choice = user_tm.content_fields("onefield")
    assert (choice.how, choice.fields) == ("inferred", (FieldSpec("passage"),))
    name = "perm_shuffle_all_onefield"
    with caplog.at_level(logging.WARNING, logger="posgen"):
        task = user_tm.load([name])["tasks"][name]
        user_tm.load(["perm_swap_5pct_onefield", "perm_swap_20pct_onefield"])
    assert caplog.text.count("onefield: content field passage, inferred") == 1  # once
    assert task.config.metadata["posgen_content_fields"]["how"] == "inferred"
    assert task.config.metadata["posgen"]["fields"] == [{"name": "passage"}]
    for doc, orig in zip(task.eval_docs, DOCS, strict=True):
        assert Counter(doc["passage"].split()) == Counter(orig["passage"].split())
        assert doc["passage"] != orig["passage"] and doc["question"] == orig["question"]


def test_a_user_task_with_two_fields_gets_the_message(user_tm) -> None:
    with pytest.raises(UnknownContentFields, match="reads: passage, question"):
        user_tm.match_tasks(["perm_swap_5pct_twofields"])


def test_a_yaml_that_includes_a_known_task_inherits_its_entry(user_tm) -> None:
    choice = user_tm.content_fields("my_gsm8k")
    assert (choice.how, choice.source, choice.fields) == (
        "known",
        "gsm8k",
        (FieldSpec("question"),),
    )


def test_an_entry_the_prompt_does_not_read_is_refused(user_tm) -> None:
    """A task that inherits an entry but renders other fields: no silent no-op."""
    with pytest.raises(UnknownContentFields, match="the content field\\(s\\) question, but its"):
        user_tm.content_fields("other_gsm8k")
