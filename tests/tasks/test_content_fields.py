"""The message for a task posgen cannot perturb names the fields it really reads."""

from __future__ import annotations

import pytest

from posgen.tasks.content_fields import UnknownContentFields, resolve_fields


def _message(config: dict) -> str:
    with pytest.raises(UnknownContentFields) as info:
        resolve_fields("mytask", config)
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


def test_a_prompted_task_names_its_doc_to_text_fields() -> None:
    config = {
        "output_type": "multiple_choice",
        "doc_to_text": "Question: {{question}}\\nAnswer:",
        "doc_to_target": "{{label}}",
    }
    assert "Its doc_to_text reads: question." in _message(config)
