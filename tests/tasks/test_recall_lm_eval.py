"""``posgen_recall`` through lm-eval: listed, scored by its own filter and metric, and
perturbed in its passage only (integration tier: a tiny model, seconds)."""

from __future__ import annotations

from collections import Counter

import pytest

from posgen.tasks import offline

PERTURBED = "perm_swap_50pct_posgen_recall"


@pytest.fixture(scope="module")
def recall_tasks(posgen_tm) -> dict:
    return posgen_tm.load(["posgen_recall", PERTURBED])["tasks"]


def test_lm_eval_lists_the_task_and_its_family(posgen_tm) -> None:
    subtasks = set(posgen_tm.all_subtasks)
    assert {"posgen_recall", "perm_swap_5pct_posgen_recall", PERTURBED} <= subtasks
    cfg = posgen_tm.task_config("posgen_recall")
    assert cfg["output_type"] == "generate_until"
    assert (
        cfg["generation_kwargs"]["max_gen_toks"] <= 5 and "\n" in cfg["generation_kwargs"]["until"]
    )


@pytest.mark.parametrize(
    ("generation", "score"),
    [
        (" snitterfield", 1.0),  # case ignored
        ("  Snitterfield fields", 1.0),  # the first word only
        (" (Snitterfield", 1.0),  # punctuation before it skipped
        (" the Snitterfield", 0.0),  # another word first
        (" Snitterfield-field", 1.0),
        ("", 0.0),  # nothing before a stop sequence: "[invalid]"
        (" 1556", 0.0),
    ],
)
def test_first_word_filter_then_exact_match(recall_tasks, generation, score) -> None:
    task = recall_tasks["posgen_recall"]
    doc = {**task.eval_docs[0], "target": "Snitterfield"}
    (ensemble,) = task._filters
    assert ensemble.name == "first-word"
    resps: list = [[generation]]
    for make in ensemble.filters:
        resps = list(make().apply(resps, [doc]))
    assert task.process_results(doc, [resps[0]]) == {"exact_match": score}


def test_tiny_model_run_scores_exact_match_and_moves_only_the_passage(
    tiny_model_dir, posgen_tm
) -> None:
    import lm_eval
    from lm_eval.models.huggingface import HFLM

    lm = HFLM(
        pretrained=str(tiny_model_dir("llama", 0)), dtype="float32", device="cpu", batch_size=4
    )
    res = lm_eval.simple_evaluate(
        model=lm,
        tasks=["posgen_recall", PERTURBED],
        task_manager=posgen_tm,
        limit=4,
        log_samples=True,
        random_seed=0,
        numpy_random_seed=0,
        torch_random_seed=0,
        fewshot_random_seed=0,
    )
    rows = {r["doc_id"]: r for r in offline.load_rows("posgen_recall.jsonl")}
    for task in ("posgen_recall", PERTURBED):
        assert 0.0 <= res["results"][task]["exact_match,first-word"] <= 1.0
        samples = res["samples"][task]
        assert len(samples) == 4
        for s in samples:
            orig = rows[s["doc"]["posgen_doc_id"] if task == PERTURBED else s["doc"]["doc_id"]]
            ((prompt, _),) = s["arguments"]
            passage = prompt.removesuffix(" " + orig["question"])
            assert passage != prompt  # the question ends the prompt, untouched
            assert Counter(passage.split()) == Counter(orig["passage"].split())
            assert (passage == orig["passage"]) is (task == "posgen_recall")
            assert s["target"] == orig["target"]
            word = s["filtered_resps"][0]
            assert s["exact_match"] == float(word.lower() == orig["target"].lower())


@pytest.mark.parametrize(("positions", "features"), [("swap:0.5", None), (None, "rope_noise:2")])
def test_position_and_feature_cells_generate_under_hf_posgen(
    tiny_model_dir, posgen_tm, positions, features
) -> None:
    """The model-side cells of a posgen run: the prompt text is the unperturbed one, the
    generation runs under the perturbation, and the first word is scored."""
    import lm_eval

    from posgen.harness.hf_posgen.model import HFPosgenLM

    lm = HFPosgenLM(
        pretrained=str(tiny_model_dir("llama", 0)), dtype="float32", device="cpu", batch_size=4
    )
    lm.set_perturbation(positions, features)
    res = lm_eval.simple_evaluate(
        model=lm, tasks=["posgen_recall"], task_manager=posgen_tm, limit=4, log_samples=True
    )
    rows = {r["doc_id"]: r for r in offline.load_rows("posgen_recall.jsonl")}
    assert 0.0 <= res["results"]["posgen_recall"]["exact_match,first-word"] <= 1.0
    for s in res["samples"]["posgen_recall"]:
        orig = rows[s["doc"]["doc_id"]]
        ((prompt, gen_kwargs),) = s["arguments"]
        assert prompt == orig["passage"] + " " + orig["question"]
        assert gen_kwargs["max_gen_toks"] <= 5
        assert s["exact_match"] == float(s["filtered_resps"][0].lower() == orig["target"].lower())
