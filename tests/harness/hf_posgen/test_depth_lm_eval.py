"""hf-posgen ``positions=depth:D`` through lm-eval's ``simple_evaluate`` on the built-in
evidence-depth tasks: at the depth the text form already put every evidence at, the
position form is the identity (bit-equal to ``hf``); at another it moves every score."""

from __future__ import annotations

import lm_eval
import pytest

from posgen.lm_eval_plugin import register_all

pytestmark = pytest.mark.heavy

# the text form at depth 0.5: every document's evidence at slot 2 of 5
TASKS = ["perm_depth_50pct_posgen_kv_n5", "perm_depth_50pct_posgen_kv_gen_n5"]


def evaluate(model: str, model_args: str, posgen_tm) -> dict:
    register_all()
    out = lm_eval.simple_evaluate(
        model=model,
        model_args=model_args,
        tasks=TASKS,
        device="cpu",
        batch_size=4,
        limit=4,
        log_samples=True,
        task_manager=posgen_tm,
    )
    return {
        task: [s["resps"] for s in sorted(out["samples"][task], key=lambda s: s["doc_id"])]
        for task in TASKS
    }


@pytest.mark.parametrize("arch", ["llama"])
def test_the_position_form_at_the_text_forms_depth_is_hf(tiny_model_dir, posgen_tm, arch):
    path = str(tiny_model_dir(arch))
    plain = evaluate("hf", f"pretrained={path}", posgen_tm)
    same = evaluate("hf-posgen", f"pretrained={path},positions=depth:0.5", posgen_tm)
    moved = evaluate("hf-posgen", f"pretrained={path},positions=depth:0", posgen_tm)
    assert same == plain
    kv = TASKS[0]
    assert all(m != p for m, p in zip(moved[kv], plain[kv], strict=True))
