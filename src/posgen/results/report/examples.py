"""The report's examples: what a nominal rate does to a document of this suite.

For one model (perturbations do not depend on the model's weights, only on its
tokenizer), every task and every perturbed cell: the document pairs (text cells, words
that moved marked) and the model rows (position cells, tokens whose position changed
marked with the position they were given; feature cells, the first position offsets).
A generative task's cells also show, per example document, the prompt the model got
(text cells: its moved words marked) and the unperturbed and perturbed generations side
by side, with what each filter extracted and the target. The same documents and rows are
shown at every rate (the smallest keys), so the nesting across rates is visible.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from posgen.results.report.render import Block

WINDOW = 48  # words or tokens shown per example
LEAD = 8  # shown before the first moved item
FEATURE_TOKENS = 10


def example_blocks(cells: Iterable[Mapping[str, Any]], model: str) -> list[Block]:
    """Blocks of the examples section for ``model``'s cells (empty if it has none)."""
    cells = [c for c in cells if c["model"] == model and "examples" in c]
    base = {c["cell"]["task"]: c for c in cells if c["cell"]["kind"] == "none"}
    out: list[Block] = []
    for task in sorted(base):
        perturbed = sorted(
            (c for c in cells if c["cell"]["task"] == task and c["cell"]["kind"] != "none"),
            key=lambda c: (c["cell"]["kind"], c["cell"]["scheme"], c["cell"]["rate"]),
        )
        if not perturbed:
            continue
        out.append(("h", 3, f"{task}"))
        for c in perturbed:
            out += _cell_examples(c, base[task]["examples"])
    return out


def _cell_examples(c: Mapping[str, Any], base: Mapping[str, Any]) -> list[Block]:
    originals = base["docs"]
    cell = c["cell"]
    title = f"{cell['kind']} {cell['scheme']} at {cell['rate']:g}"
    if cell["scheme"] == "depth":  # D is where the evidence sits, not a rate
        title = f"{cell['kind']} form, evidence at depth {cell['rate']:g}"
    blocks: list[Block] = []
    generations = c["examples"].get("generations", {})
    if cell["kind"] == "text" and not generations:  # a generative cell shows its prompt
        for key, fields in c["examples"]["docs"].items():
            for name, new in fields.items():
                old = originals.get(key, {}).get(name)
                if isinstance(old, str) and (old != new or len(old.split()) > 3):
                    blocks += _text_pair(f"{title}, document {key}, field {name}", old, new)
    else:
        for row in c["examples"].get("rows", []):
            blocks += _row_example(f"{title}, row {row['key'][:8]} ({row['n']} tokens)", row)
    for key, gen in generations.items():
        before = base.get("generations", {}).get(key)
        blocks += generation_blocks(f"{title}, document {key}", before, gen, cell["kind"])
    if not blocks:
        blocks.append(("p", f"{title}: no example recorded."))
    return blocks


GENERATION_CHARS = 240  # characters of a generation shown


def generation_blocks(
    title: str, base: Mapping[str, Any] | None, gen: Mapping[str, Any], kind: str
) -> list[Block]:
    """The perturbed prompt (text cells: moved words marked) and a table of the
    unperturbed and perturbed generations, each filter's extraction and the target."""
    if base is None:
        return [("p", f"{title}: the unperturbed cell recorded no generation of it.")]
    out: list[Block] = []
    if kind == "text":
        out += _text_pair(f"{title}, prompt", base["prompt"], gen["prompt"])
    else:
        out.append(("p", f"{title}: the same prompt, its positions perturbed inside the model."))
    rows = [["generation", _short(base["generation"]), _short(gen["generation"])]]
    for name, text in gen.get("filtered", {}).items():
        rows.append(
            [f"{name} extracts", _short(base.get("filtered", {}).get(name, "")), _short(text)]
        )
    rows.append(["target", _short(base["target"]), _short(gen["target"])])
    return [*out, ("table", ["", "unperturbed", "perturbed"], rows)]


def _short(text: str) -> str:
    text = str(text).replace("\n", "⏎ ")
    return text if len(text) <= GENERATION_CHARS else text[: GENERATION_CHARS - 1] + "…"


def _text_pair(title: str, old: str, new: str) -> list[Block]:
    """Original and perturbed words, the moved ones (index whose word changed) marked."""
    old_words, new_words = old.split(), new.split()
    if len(old_words) != len(new_words):
        return [("p", f"{title}: the field's word count changed; not a reordering.")]
    moved = [i for i, (a, b) in enumerate(zip(old_words, new_words, strict=True)) if a != b]
    lo, hi = _window(len(old_words), moved)
    note = f"{len(moved)} of {len(old_words)} words moved" if moved else "nothing moved"
    return [
        ("p", f"{title}: {note}."),
        ("marked", [("original: ", False), *_segments(old_words, moved, lo, hi)]),
        ("marked", [("perturbed: ", False), *_segments(new_words, moved, lo, hi)]),
    ]


def _row_example(title: str, row: Mapping[str, Any]) -> list[Block]:
    tokens, positions = row["tokens"], row.get("positions")
    if positions is None:
        return [("p", f"{title}: no position changed (noise on q/k, not on positions).")]
    if all(float(p) == int(p) for p in positions):
        moved = [t for t, p in enumerate(positions) if int(p) != t]
        lo, hi = _window(len(tokens), moved)
        pieces = [
            _clean(tok) + (f"→{int(p)}" if t in moved else "")
            for t, (tok, p) in enumerate(zip(tokens, positions, strict=True))
        ]
        note = (
            f"{len(moved)} of the first {len(tokens)} tokens moved (token→position given)"
            if moved
            else f"nothing moved in the first {len(tokens)} tokens"
        )
        return [
            ("p", f"{title}: {note}."),
            ("marked", [("tokens: ", False), *_segments(pieces, moved, lo, hi, sep="")]),
        ]
    shown = [
        f"{_clean(tok).strip() or '␣'}({float(p) - t:+.2f})"
        for t, (tok, p) in enumerate(zip(tokens[:FEATURE_TOKENS], positions, strict=False))
    ]
    return [
        ("p", f"{title}: position offsets p'[t] − t of the first tokens."),
        ("marked", [(" ".join(shown), True)]),
    ]


def _clean(token: str) -> str:
    return re.sub(r"\s+", " ", token)


def _window(n: int, moved: list[int]) -> tuple[int, int]:
    lo = max(0, min(moved) - LEAD) if moved else 0
    return lo, min(n, lo + WINDOW)


def _segments(
    items: list[str], moved: list[int], lo: int, hi: int, sep: str = " "
) -> list[tuple[str, bool]]:
    marked = set(moved)
    out: list[tuple[str, bool]] = [("… ", False)] if lo > 0 else []
    for i in range(lo, hi):
        out.append((items[i], i in marked))
        if sep and i < hi - 1:
            out.append((sep, False))
    if hi < len(items):
        out.append((" …", False))
    return out


def examples_section(models: list[str], cells: Iterable[Mapping[str, Any]]) -> list[Block]:
    """The report's examples section, from the first model's cells (none: no section)."""
    cells = list(cells)
    blocks = example_blocks(cells, models[0]) if models else []
    if not blocks:
        return []
    intro = (
        f"Examples ({models[0]}'s cells; the perturbations do not depend on the weights): "
        "the same documents and model rows at every rate, moved words or tokens marked. "
        "A position example shows each moved token with the position it was given."
    )
    heading = "Examples: what a rate does on this suite"
    if any(c["cell"]["scheme"] == "depth" for c in cells if c["model"] == models[0]):
        heading = "Examples: what a rate or an evidence depth does on this suite"
        intro = intro.replace("at every rate", "at every rate and depth")
    return [("h", 2, heading), ("p", intro), *blocks]
