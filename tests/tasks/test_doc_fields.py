"""Which doc fields a prompt part reads: templates, field names, functions (unit tier)."""

from __future__ import annotations

import functools
import textwrap

from posgen.tasks.doc_fields import callable_reads, part_reads, template_reads, value_reads


def _one_field(doc):
    return "Q: " + doc["question"] + "\nA:"


def _helper(d):
    return d.get("context", "")


def _via_helper(doc):
    return _helper(doc) + doc["question"]["text"]


def _escapes(doc):
    return str(doc) + doc["question"]


def _keyed(doc):
    key = "question"
    return doc[key]


def _second(prefix, doc):
    return prefix + doc["passage"]


class _Task:
    def doc_to_text(self, doc):
        return self._fmt(doc)

    def _fmt(self, doc):
        return doc["passage"]


def test_template_variables_are_its_fields() -> None:
    t = "{% set pre = 'Q: ' %}{{ pre + question.strip() }}{% for c in choices %}{{c}}{% endfor %}"
    assert template_reads(t).fields == {"question", "choices"}
    assert template_reads("{{answer if few_shot is undefined else solution}}").fields == {
        "answer",
        "few_shot",
        "solution",
    }
    broken = template_reads("{{ question ")
    assert broken.fields == frozenset() and not broken.complete


def test_field_names_constants_and_absent_parts() -> None:
    assert value_reads("prompt").fields == {"prompt"} and value_reads("prompt").form == "field"
    assert value_reads(0).form == value_reads(["yes", "no"]).form == "constant"
    assert value_reads(None).form == "absent" and value_reads("").fields == frozenset()


def test_functions_are_read_from_their_source() -> None:
    assert callable_reads(_one_field).fields == {"question"}
    via = callable_reads(_via_helper)
    assert via.fields == {"context", "question"} and via.complete
    assert callable_reads(functools.partial(_second, "x")).fields == {"passage"}
    assert callable_reads(_Task.doc_to_text).fields == {"passage"}


def test_a_doc_that_escapes_makes_the_reading_incomplete() -> None:
    escaped = callable_reads(_escapes)
    assert escaped.fields == {"question"} and not escaped.complete
    assert not callable_reads(_keyed).complete
    assert not callable_reads(print).complete  # no Python source


def test_unresolved_function_and_class_paths(tmp_path) -> None:
    """lm-eval's task index keeps ``!function`` values as ``/dir/module.name`` strings."""
    (tmp_path / "utils.py").write_text(
        textwrap.dedent(
            """
            from functools import partial

            def fmt(doc, with_answer):
                return doc["question"] + (doc["answer"] if with_answer else "")

            doc_to_text = partial(fmt, with_answer=False)
            """
        )
    )
    (tmp_path / "task.py").write_text(
        textwrap.dedent(
            """
            class MyTask(ConfigurableTask):
                def doc_to_text(self, doc):
                    return doc["story"]
            """
        )
    )
    reads = value_reads(f"{tmp_path}/utils.doc_to_text")
    assert reads.fields == {"question", "answer"} and reads.form == "function"
    config = {"class": f"{tmp_path}/task.MyTask", "doc_to_target": "{{label}}"}
    assert part_reads(config, "doc_to_text").fields == {"story"}
    assert part_reads(config, "doc_to_text").form == "method"
    assert part_reads(config, "doc_to_target").fields == {"label"}  # not on the class
    assert not value_reads(f"{tmp_path}/utils.missing").complete
