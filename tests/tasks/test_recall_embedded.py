"""``posgen_recall`` on the embedded SmolLM2-135M (slow tier): the reference answers."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.slow

# The embedded model's greedy generations for the first four items (after lm-eval cut
# them at the task's stop sequences), as `lm_eval --model hf --tasks posgen_recall`
# gives them at batch size 1 and 8; the third is the target.
REFERENCE = {
    "recall-britannica-00-0032": (" Baddesley Clinton", 0.0),
    "recall-britannica-00-0049": (" the brother of the Earl", 0.0),
    "recall-britannica-00-0074": (" consent", 1.0),
    "recall-britannica-00-0179": (" works", 0.0),
}


def test_greedy_answers_match_the_reference(embedded_model_dir, posgen_tm) -> None:
    import lm_eval
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(pretrained=str(embedded_model_dir), dtype="float32", device="cpu", batch_size=4)
    res = lm_eval.simple_evaluate(
        model=lm, tasks=["posgen_recall"], task_manager=posgen_tm, limit=4, log_samples=True
    )
    got = {
        s["doc"]["doc_id"]: (s["resps"][0][0], s["exact_match"])
        for s in res["samples"]["posgen_recall"]
    }
    assert got == REFERENCE
