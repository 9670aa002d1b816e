"""Rate 0 of a wrapped task reproduces the base task's metrics exactly (tiny model)."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.heavy


@pytest.fixture(scope="module")
def tiny_lm(tiny_model_dir):
    from lm_eval.models.huggingface import HFLM

    return HFLM(
        pretrained=str(tiny_model_dir("llama", 0)), dtype="float32", device="cpu", batch_size=4
    )


def evaluate(lm, tm, cfgs: list[dict], **kw) -> dict:
    import lm_eval

    return lm_eval.simple_evaluate(
        model=lm,
        tasks=cfgs,
        task_manager=tm,
        log_samples=True,
        random_seed=0,
        numpy_random_seed=0,
        torch_random_seed=0,
        fewshot_random_seed=1234,
        **kw,
    )


def metrics(res: dict, task: str) -> dict:
    return {k: v for k, v in res["results"][task].items() if k not in ("alias", "name")}


@pytest.mark.parametrize("base", ["posgen_cloze", "posgen_prose", "posgen_recall", "hellaswag"])
def test_rate_zero_reproduces_the_base_metrics(tiny_lm, posgen_tm, local_data, base) -> None:
    over = local_data.get(base)
    shots = 2 if base == "hellaswag" else 0  # few-shot from the eval split: exclusion path
    names = {r: f"perm_swap_{r}pct_{base}" for r in (0, 50)}
    cfgs = [posgen_tm.task_config(base, over)] + [
        posgen_tm.task_config(n, over) for n in names.values()
    ]
    res = evaluate(tiny_lm, posgen_tm, cfgs, limit=5, num_fewshot=shots)
    assert metrics(res, names[0]) == metrics(res, base)

    def per_doc(task: str, key: str) -> list:
        return [s[key] for s in res["samples"][task]]

    for key in ("arguments", "resps"):  # per document: same prompts, same log-likelihoods
        assert per_doc(names[0], key) == per_doc(base, key)
        assert per_doc(names[50], key) != per_doc(base, key)  # the comparison can tell
