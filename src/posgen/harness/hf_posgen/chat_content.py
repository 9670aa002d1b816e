"""Which tokens of a chat-templated context are content, and which the template's own.

Under ``--apply_chat_template`` lm-eval renders every prompt through the model's
``apply_chat_template(messages)``: the messages' contents (system prompt, few-shot turns,
the document's question, a ``gen_prefix``) with the template's role markers, special
tokens and separators around them. ``hf-posgen`` perturbs the content only: the
template's tokens keep their positions, as they keep their text in a text cell.

:class:`ChatContents` remembers, for every string the model rendered, the character
spans of its messages' contents (found in order in the rendered string, as the template
wrote them); :meth:`ChatContents.token_mask` turns them into a mask over the context's
tokens. A token is content when every character it covers lies inside one content span;
a token that also covers a template character (or none, like BOS) is the template's.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

Span = tuple[int, int]


class ChatContentError(RuntimeError):
    """The content of a chat-templated context cannot be told from its template."""


def content_spans(rendered: str, messages: Sequence[dict[str, Any]]) -> list[Span]:
    """Character spans ``[start, end)`` of each message's content in ``rendered``, found in
    message order (a template may trim the content: its stripped form is tried next). A
    system message the rendering does not hold is skipped (lm-eval renders without the
    system turn when a template rejects it). Raises :class:`ChatContentError` for any
    other content not found."""
    spans: list[Span] = []
    cursor = 0
    for i, message in enumerate(messages):
        content = message.get("content")
        if not isinstance(content, str):
            raise ChatContentError(
                f"chat message {i} has content of type {type(content).__name__}; "
                "hf-posgen locates text contents only"
            )
        found = _find(rendered, content, cursor)
        if found is None:
            if message.get("role") == "system" and _find(rendered, content, 0) is None:
                continue
            raise ChatContentError(
                f"the chat template does not write message {i} ({message.get('role')}) "
                f"verbatim after character {cursor} of the rendered prompt, so hf-posgen "
                "cannot tell its content from the template's tokens; run model-side cells "
                "without --apply_chat_template, or with a template that writes contents as given"
            )
        if found[1] > found[0]:
            spans.append(found)
        cursor = found[1]
    return spans


def _find(text: str, content: str, start: int) -> Span | None:
    for needle in (content, content.strip()):
        if not needle:
            return (start, start)
        at = text.find(needle, start)
        if at >= 0:
            return (at, at + len(needle))
    return None


class ChatContents:
    """The content spans of every prompt one model rendered through its chat template."""

    def __init__(self) -> None:
        self.active = False  # lm-eval asked for a chat template
        self._messages: dict[str, list[dict[str, Any]]] = {}
        self._masks: dict[tuple[str, tuple[int, ...]], np.ndarray] = {}

    def record(self, rendered: str, messages: Sequence[dict[str, Any]]) -> None:
        """Remember ``rendered``, the template applied to ``messages``. The contents are
        located only when a perturbed forward needs them (an unperturbed cell never
        does, whatever the template)."""
        self.active = True
        self._messages.setdefault(rendered, [dict(m) for m in messages])

    def request_mask(self, tokenizer: Any, request: Any) -> np.ndarray | None:
        """The content mask of an HFLM token request ``(strings, context_enc,
        continuation_enc)``'s context tokens; None (every context token counts) without a
        chat template or without a context string."""
        strings, context_enc, _ = request
        if not self.active or strings is None or not strings[0]:
            return None
        return self.token_mask(tokenizer, strings[0], context_enc)

    def token_mask(
        self, tokenizer: Any, context: str, context_enc: Sequence[int], whole: bool = False
    ) -> np.ndarray:
        """Boolean mask over ``context_enc``: which tokens are content. ``context`` is the
        request's context string as lm-eval built it (for a log-likelihood request HFLM
        encodes it without trailing whitespace, which goes to the continuation; with
        ``whole``, a generation context, the whole string); ``context_enc`` its tokens as
        HFLM encoded them (a leading BOS is the template's)."""
        key = (context, tuple(int(t) for t in context_enc), whole)
        mask = self._masks.get(key)
        if mask is None:
            mask = self._masks[key] = self._token_mask(tokenizer, context, key[1], whole)
        return mask

    def generation_masks(
        self, tokenizer: Any, contexts: Sequence[str], encoded: Sequence[Sequence[int]]
    ) -> list[np.ndarray] | None:
        """The content masks of a generation batch's contexts (``encoded[b]``: the whole
        tokens of ``contexts[b]``, before any truncation); None without a chat template."""
        if not self.active:
            return None
        return [
            self.token_mask(tokenizer, c, ids, whole=True)
            for c, ids in zip(contexts, encoded, strict=True)
        ]

    def _token_mask(
        self, tokenizer: Any, context: str, ids: tuple[int, ...], whole: bool
    ) -> np.ndarray:
        messages = self._messages.get(context)
        if messages is None:
            raise ChatContentError(
                "a chat-templated context reached hf-posgen that it did not render in "
                "this process (lm-eval's request cache, --cache_requests?), so it cannot "
                "tell the content from the template's tokens; run without the request cache"
            )
        spans = content_spans(context, messages)
        text = context if whole else context.rstrip()
        lead, offsets = tail_offsets(
            tokenizer,
            text,
            ids,
            ChatContentError,
            "model-side perturbations under a chat template",
            "the chat template's content",
        )
        mask = np.zeros(len(ids), dtype=bool)
        for t, (start, end) in enumerate(offsets):
            if end > start and any(a <= start and end <= b for a, b in spans):
                mask[lead + t] = True
        return mask


def tail_offsets(
    tokenizer: Any, text: str, ids: Sequence[int], refused: type[Exception], why: str, what: str
) -> tuple[int, list[tuple[int, int]]]:
    """``(lead, offsets)``: ``text``'s own tokens are the last of the context ``ids`` HFLM
    scores (``lead`` tokens before them: special tokens, a BOS), each with its character
    offsets, from a fast tokenizer. Else ``refused`` in one line: ``why`` the offsets are
    needed (no fast tokenizer), ``what`` cannot be placed (the tokens differ)."""
    if not getattr(tokenizer, "is_fast", False):
        raise refused(
            f"{why} need a fast tokenizer (the character offsets of each token); load one with use_fast=True"
        )
    enc = tokenizer(text, add_special_tokens=False, return_offsets_mapping=True)
    own, offsets = list(enc["input_ids"]), enc["offset_mapping"]
    lead = len(ids) - len(own)
    if lead < 0 or list(ids[lead:]) != own:
        raise refused(
            f"the context's tokens as scored differ from its characters' tokens "
            f"({len(ids)} vs {len(own)} tokens), so {what} cannot be placed among them"
        )
    return lead, [(int(a), int(b)) for a, b in offsets]
