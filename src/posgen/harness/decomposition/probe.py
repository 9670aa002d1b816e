"""The probe text of the decomposition (stdlib at import time).

Probe text: the *Encyclopaedia Britannica* 11th-edition (1911, public domain) article on
Shakespeare, cleaned by :func:`posgen.tasks.corpora.britannica_text` and shipped with
posgen as package data (``posgen/tasks/data/``, sha256 in its manifest), followed by
Python's ``pydoc_data.topics`` pages (standard library) in sorted order. The text is
tokenized once and cut into consecutive, non-overlapping windows of exactly ``tokens``
tokens (no special tokens).
"""

from __future__ import annotations

from posgen.tasks.offline import probe_britannica

DEFAULT_DOCS = 8  # probe windows of a decomposition
DEFAULT_TOKENS = 256  # tokens per window


def probe_text() -> str:
    """The embedded probe text (module docstring), always the same for the same Python."""
    from pydoc_data.topics import topics

    return probe_britannica().rstrip("\n") + "\n\n" + "\n\n".join(topics[k] for k in sorted(topics))


def probe_token_windows(tokenizer, *, docs: int, tokens: int) -> list[list[int]]:
    """``docs`` consecutive windows of ``tokens`` token ids of the probe text."""
    if docs < 1 or tokens < 2:
        raise ValueError(f"need docs >= 1 and tokens >= 2, got docs={docs}, tokens={tokens}")
    text = probe_text()
    ids: list[int] = []
    for part in text.split("\n\n"):  # tokenize paragraph by paragraph until enough
        ids.extend(tokenizer(part + "\n\n", add_special_tokens=False)["input_ids"])
        if len(ids) >= docs * tokens:
            break
    if len(ids) < docs * tokens:
        raise ValueError(
            f"the probe text has {len(ids)} tokens, fewer than docs × tokens = "
            f"{docs * tokens}; lower --docs or --tokens"
        )
    return [ids[k * tokens : (k + 1) * tokens] for k in range(docs)]
