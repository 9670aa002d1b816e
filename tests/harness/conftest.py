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
