"""loglikelihood and loglikelihood_rolling requests for the tests of hf-posgen on tiny
models: documents of very different lengths, scored whole or as one context with several
continuations."""

from __future__ import annotations

from lm_eval.api.instance import Instance

from tiny_models import training_text

# 10 documents of very different lengths, so batches of 4 and 16 are right-padded.
TEXTS = [t[: 40 + 47 * i] for i, t in enumerate(training_text()[:10])]


def rolling(lm, texts=TEXTS) -> list[float]:
    reqs = [Instance("loglikelihood_rolling", None, (t,), i) for i, t in enumerate(texts)]
    return lm.loglikelihood_rolling(reqs, disable_tqdm=True)


def pairs(lm) -> list[float]:
    """Multiple-choice style requests: one context, several continuations."""
    ctx = TEXTS[5][:200]
    reqs = [
        Instance("loglikelihood", None, (ctx, " " + t[: 20 + 7 * i]), i)
        for i, t in enumerate(TEXTS[:6])
    ]
    return [ll for ll, _ in lm.loglikelihood(reqs, disable_tqdm=True)]
