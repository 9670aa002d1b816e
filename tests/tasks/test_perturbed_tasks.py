"""Perturbed lm-eval tasks: content moves, scaffold stays (integration tier, no model)."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from hub_fixtures import ARC_DOCS, HELLASWAG_DOCS
from posgen.perturbations import parse
from posgen.tasks.content_fields import UnknownContentFields, known_fields
from posgen.tasks.perturbed_task import TaskPerturbation, perturb_docs


def build(tm, name: str, overrides=None):
    return tm.load([tm.task_config(name, overrides)])["tasks"][name]


def test_hellaswag_perturbs_the_context_after_its_own_process_docs(posgen_tm, local_data):
    base = build(posgen_tm, "hellaswag", local_data["hellaswag"])
    pert = build(posgen_tm, "perm_shuffle_all_hellaswag", local_data["hellaswag"])
    changed = 0
    for b, p in zip(base.eval_docs, pert.eval_docs, strict=True):
        label = b["query"].split(": ", 1)[0] + ": "
        assert p["query"].startswith(label)  # the activity label stays in front
        assert Counter(p["query"].split()) == Counter(b["query"].split())
        assert p["choices"] == b["choices"] and p["gold"] == b["gold"]  # built by process_docs
        assert pert.doc_to_target(p) == base.doc_to_target(b)
        assert pert.doc_to_choice(p) == base.doc_to_choice(b)
        assert pert.doc_to_text(p) == p["query"]
        changed += p["query"] != b["query"]
    assert changed == len(HELLASWAG_DOCS)
    assert [d["posgen_doc_id"] for d in pert.eval_docs] == [str(d["ind"]) for d in HELLASWAG_DOCS]
    meta = pert.config.metadata["posgen"]
    assert meta["spec"]["name"] == "shuffle" and meta["seed"] == 1234
    assert meta["base_task"] == "hellaswag" and meta["order_stats"]["n_docs"] == 5


def test_arc_question_moves_but_template_choices_and_fewshot_do_not(posgen_tm, local_data):
    base = build(posgen_tm, "arc_easy", local_data["arc_easy"])
    pert = build(posgen_tm, "perm_swap_50pct_arc_easy", local_data["arc_easy"])
    originals = {d["question"] for d in ARC_DOCS}
    for doc, orig, bdoc in zip(pert.eval_docs, ARC_DOCS, base.eval_docs, strict=True):
        assert doc["question"] != orig["question"]
        assert Counter(doc["question"].split()) == Counter(orig["question"].split())
        assert doc["choices"] == orig["choices"] and doc["answerKey"] == orig["answerKey"]
        base.set_fewshot_seed(1234)
        pert.set_fewshot_seed(1234)
        shots, query = pert.fewshot_context(doc, num_fewshot=2).rsplit("\n\n", 1)
        assert query == f"Question: {doc['question']}\nAnswer:"
        assert shots == base.fewshot_context(bdoc, num_fewshot=2).rsplit("\n\n", 1)[0]
        fewshot_questions = [
            s.split("\n")[0].removeprefix("Question: ") for s in shots.split("\n\n")
        ]
        assert len(fewshot_questions) == 2 and set(fewshot_questions) <= originals
        assert doc["posgen_doc_id"] == orig["id"] and doc["posgen_fraction_moved"] > 0


def test_the_eval_doc_is_still_excluded_from_its_own_few_shots(posgen_tm, local_data):
    """HellaSwag draws few-shots from the eval split: lm-eval drops the eval doc from
    them by equality, which must still hold for the perturbed doc."""
    pert = build(posgen_tm, "perm_shuffle_all_hellaswag", local_data["hellaswag"])
    base = build(posgen_tm, "hellaswag", local_data["hellaswag"])
    for seed in range(5):
        pert.set_fewshot_seed(seed)
        for doc, bdoc in zip(pert.eval_docs, base.eval_docs, strict=True):
            shots = pert.fewshot_context(doc, num_fewshot=4).rsplit("\n\n", 1)[0]
            assert bdoc["query"] not in shots


def test_fields_with_protected_parts() -> None:
    lam = [{"text": "the cat sat on the warm mat and then the cat slept"}]
    wino = [
        {
            "sentence": "Sarah was a much better surgeon than Maria so _ always got the "
            "harder cases.",
            "option1": "Sarah",
            "option2": "Maria",
            "answer": "1",
        }
    ]
    p = parse("text", "shuffle")
    for task, docs, fixed in (
        ("lambada_openai", lam, lambda d: d["text"].split()[-1]),
        ("winogrande", wino, lambda d: d["sentence"].split("_", 1)[1]),
    ):
        tp = TaskPerturbation(p, 5, task, known_fields(task))
        out, _ = perturb_docs(docs, tp, "test")
        assert fixed(out[0]) == fixed(docs[0])
        field = known_fields(task)[0].name
        assert out[0][field] != docs[0][field] and out[0]["posgen_doc_id"] == "test:0"


def test_unknown_task_names_its_fields_and_how_to_choose(posgen_tm, monkeypatch) -> None:
    with pytest.raises(UnknownContentFields) as err:
        posgen_tm.match_tasks(["perm_swap_5pct_prost"])
    msg = str(err.value)
    assert "context, ex_question" in msg and "posgen_fields" in msg and "posgen tasks write" in msg
    monkeypatch.setattr(posgen_tm, "metadata", {"posgen_fields": {"prost": ["context"]}})
    cfg = posgen_tm.task_config("perm_swap_5pct_prost")
    assert cfg["posgen_perturbation"]["fields"] == [{"name": "context"}]
    assert cfg["metadata"]["posgen_content_fields"]["how"] == "metadata"


def test_bad_names_fail_clearly(posgen_tm) -> None:
    with pytest.raises(ValueError, match="Did you mean 'swap'"):
        posgen_tm.match_tasks(["perm_swp_5pct_hellaswag"])
    with pytest.raises(ValueError, match="is not a rate"):
        posgen_tm.match_tasks(["perm_swap_5percent_hellaswag"])
    with pytest.raises(ValueError, match="not an lm-eval task"):
        posgen_tm.match_tasks(["perm_swap_5pct_no_such_task"])
    with pytest.raises(ValueError, match="cannot be perturbed again"):
        posgen_tm.match_tasks(["perm_swap_5pct_perm_swap_5pct_posgen_cloze"])


def test_groups_and_tags_of_any_task_resolve(posgen_tm) -> None:
    assert posgen_tm.match_tasks(["perm_swap_5pct_ai2_arc"]) == ["perm_swap_5pct_ai2_arc"]
    tag = posgen_tm.task_index["perm_swap_5pct_ai2_arc"]
    assert tag.tags == {"perm_swap_5pct_arc_easy", "perm_swap_5pct_arc_challenge"}
    group = posgen_tm.load(["perm_swap_0p5pct_seed9"])
    assert group["group_map"] == {
        "perm_swap_0p5pct_seed9": [
            "perm_swap_0p5pct_seed9_posgen_prose",
            "perm_swap_0p5pct_seed9_posgen_cloze",
            "perm_swap_0p5pct_seed9_posgen_recall",
        ]
    }
    task = group["tasks"]["perm_swap_0p5pct_seed9_posgen_cloze"]
    assert task.config.metadata["posgen"]["seed"] == 9
    assert task.config.metadata["posgen"]["spec"]["params"] == {"rate": 0.005}


def test_suite_docs_carry_their_ids_and_stats(posgen_tm) -> None:
    tasks = posgen_tm.load(["perm_swap_20pct"])["tasks"]
    cloze = tasks["perm_swap_20pct_posgen_cloze"]
    docs = cloze.eval_docs
    assert [d["posgen_doc_id"] for d in docs] == [d["doc_id"] for d in docs]
    assert len(set(docs["posgen_doc_id"])) == len(docs) == 64
    stats = cloze.config.metadata["posgen"]["order_stats"]
    assert stats["n_docs"] == 64 and stats["n_too_short"] == 0
    assert 0.1 < stats["mean_fraction_moved"] <= 0.2


def _jsonl(path, rows) -> str:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


GSM8K_DOCS = [
    {
        "question": question,
        "answer": f"She works it out step by step.\n#### {answer}",
    }
    for question, answer in [
        (
            "Natalia sold clips to 48 of her friends in April, and then she sold half as "
            "many clips in May to the neighbours who lived on her street and to the "
            "children at the school near her house. How many clips did Natalia sell "
            "altogether in April and May of that year?",
            72,
        ),
        (
            "Weng earns 12 dollars an hour for babysitting the two young children who live "
            "next door to her family. Yesterday she did just 50 minutes of babysitting "
            "before their parents came home early from the cinema. How much money did "
            "she earn for that babysitting?",
            10,
        ),
    ]
]


def test_gsm8k_perturbs_its_question_and_keeps_its_answer(posgen_tm, tmp_path) -> None:
    """``perm_swap_5pct_gsm8k`` resolves from posgen's table, without the hub."""
    data = _jsonl(tmp_path / "gsm8k.jsonl", GSM8K_DOCS)
    local = {
        "dataset_path": "json",
        "dataset_name": None,
        "dataset_kwargs": {"data_files": {"train": data, "test": data}},
    }
    pert = build(posgen_tm, "perm_swap_5pct_gsm8k", local)
    assert pert.config.metadata["posgen_content_fields"] == {
        "fields": [{"name": "question"}],
        "how": "known",
        "source": "gsm8k",
    }
    for doc, orig in zip(pert.eval_docs, GSM8K_DOCS, strict=True):
        assert doc["question"] != orig["question"] and doc["answer"] == orig["answer"]
        assert Counter(doc["question"].split()) == Counter(orig["question"].split())
        assert pert.doc_to_text(doc) == f"Question: {doc['question']}\nAnswer:"
        assert doc["posgen_fraction_moved"] > 0


def test_a_python_task_that_builds_its_own_config_is_perturbed(tmp_path) -> None:
    """Like lm-eval's SQuAD2: the class ignores the config it is given."""
    from lm_eval.api.task import ConfigurableTask

    from posgen.tasks.field_spec import FieldSpec
    from posgen.tasks.perturbed_task import perturbed_class

    data = _jsonl(tmp_path / "own.jsonl", [{"context": t} for t in ("a b c d", "e f g h")])

    class OwnConfig(ConfigurableTask):
        def __init__(self, config=None):
            own = {"dataset_path": "json", "dataset_kwargs": {"data_files": {"validation": data}}}
            super().__init__(config={**own, "metadata": {"version": 3}})

        def has_test_docs(self):
            return False

        def has_validation_docs(self):
            return True

        def validation_docs(self):
            return self.dataset["validation"]

        def doc_to_text(self, doc):
            return "Background: " + doc["context"]

        def doc_to_target(self, doc):
            return " unanswerable"

    tp = TaskPerturbation(parse("text", "shuffle"), 3, "own", (FieldSpec("context"),))
    task = perturbed_class(OwnConfig)(config={"posgen_perturbation": tp.to_dict()})
    docs = task.eval_docs
    assert [d["posgen_doc_id"] for d in docs] == ["validation:0", "validation:1"]
    assert Counter(docs[0]["context"].split()) == Counter(["a", "b", "c", "d"])
    meta = task.config.metadata
    assert meta["version"] == 3 and meta["posgen"]["order_stats"]["n_docs"] == 2


def test_a_group_with_inline_groups_is_perturbed_member_by_member(tmp_path) -> None:
    """Like mmlu_generative: ``task:`` lists inline groups around named tasks."""
    from posgen.tasks.lm_eval_tasks import PosgenTaskManager

    (tmp_path / "suite.yaml").write_text(
        "group: mysuite\n"
        "task:\n"
        "  - group: part_a\n"
        "    task: [posgen_cloze]\n"
        "    aggregate_metric_list: [{metric: acc}]\n"
        "  - posgen_prose\n"
    )
    (tmp_path / "inline.yaml").write_text(
        "group: withtask\ntask:\n  - {task: made_here, dataset_path: json}\n"
    )
    tm = PosgenTaskManager(include_path=str(tmp_path), include_defaults=False)
    loaded = tm.load(["perm_swap_5pct_mysuite"])
    assert sorted(loaded["tasks"]) == ["perm_swap_5pct_posgen_cloze", "perm_swap_5pct_posgen_prose"]
    cloze = loaded["tasks"]["perm_swap_5pct_posgen_cloze"]
    assert cloze.config.metadata["posgen"]["fields"] == [{"name": "context"}]
    assert "perm_swap_5pct_mysuite::part_a" in loaded["groups"]
    with pytest.raises(ValueError, match="defines tasks inline"):
        tm.match_tasks(["perm_swap_5pct_withtask"])
