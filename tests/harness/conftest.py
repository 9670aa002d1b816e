"""A local Hugging Face cache holding ``org/tiny`` at ``HUB_SHA``, with the hub offline."""

from __future__ import annotations

import pytest

HUB_SHA = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture
def offline_cache(tmp_path, monkeypatch):
    import huggingface_hub.constants

    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_CACHE", str(tmp_path))
    repo = tmp_path / "models--org--tiny"
    (repo / "refs").mkdir(parents=True)
    (repo / "refs" / "main").write_text(HUB_SHA)
    (repo / "snapshots" / HUB_SHA).mkdir(parents=True)
    (repo / "snapshots" / HUB_SHA / "config.json").write_text('{"model_type": "llama"}')
    return tmp_path


UNFITTED = "test: this family's logits are not fitted"


@pytest.fixture
def unfitted_falcon(monkeypatch):
    """Falcon-ALiBi registered, for one test, with a ``logits_refusal``: an ALiBi family
    whose positions hf-posgen moves but whose logits the commands do not fit (no family
    built in is one; a user's registered family may be)."""
    from dataclasses import replace

    from posgen.harness.model_side import family

    falcon = family._FAMILIES["falcon-alibi"]
    monkeypatch.setitem(family._FAMILIES, "falcon-alibi", replace(falcon, logits_refusal=UNFITTED))
    return UNFITTED
