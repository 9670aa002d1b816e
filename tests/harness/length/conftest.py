"""Fixtures shared by the ``posgen length`` tests."""

from __future__ import annotations

import pytest
from tests.tiny_models import build_short_context_model, build_tokenizer

SHORT_CONTEXT = 64  # the trained context C of the length tests' tiny Llama


@pytest.fixture(scope="module")
def tiny_path(tmp_path_factory):
    """A saved tiny Llama trained-context ``SHORT_CONTEXT`` (C) with its tokenizer."""
    path = tmp_path_factory.mktemp("tiny-short")
    build_short_context_model("llama", max_positions=SHORT_CONTEXT).save_pretrained(path)
    build_tokenizer().save_pretrained(path)
    return path
