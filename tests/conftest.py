"""Shared fixtures: tiny local models (seconds) and the embedded model (slow tier)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

from tiny_models import save_tiny


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory):
    """``tiny_model_dir(arch="llama", seed=0) -> Path``: a saved tiny model + tokenizer."""
    made: dict[tuple[str, int], Path] = {}

    def make(arch: str = "llama", seed: int = 0) -> Path:
        if (arch, seed) not in made:
            made[(arch, seed)] = save_tiny(
                tmp_path_factory.mktemp(f"tiny-{arch}-{seed}"), arch, seed
            )
        return made[(arch, seed)]

    return make


@pytest.fixture(scope="session")
def embedded_model_dir() -> Path:
    """The embedded SmolLM2-135M as a plain Hugging Face folder (converted once)."""
    from posgen.harness.embedded import embedded_model_path

    return embedded_model_path()
