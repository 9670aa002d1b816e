"""posgen's content-field table against lm-eval 0.4.13's own task configs (integration
tier: one pass over the session's task index, no dataset, nothing of a task imported)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from posgen.tasks.content_fields_table import KNOWN, REFUSED, ContentEntry, markdown_table
from posgen.tasks.doc_fields import PARTS, part_reads
from posgen.tasks.task_ancestry import TaskAncestry

DOCS = Path(__file__).resolve().parents[2] / "docs" / "tasks.md"


@pytest.fixture(scope="module")
def covered(posgen_tm) -> dict[str, list[str]]:
    """table key -> the tasks whose nearest declared ancestor (or own name) it is."""
    ancestry = TaskAncestry(posgen_tm.task_index)
    out: dict[str, list[str]] = {key: [] for key in {**KNOWN, **REFUSED}}
    for key in out:
        for task in sorted(ancestry.tasks_under(key)):
            chain = [task, *ancestry.ancestors(task)]
            if next(n for n in chain if n in out) == key:
                out[key].append(task)
    return out


def problems_of(entry: ContentEntry, config: dict) -> list[str]:
    """What is wrong with ``entry`` for one task's indexed config (empty: nothing)."""
    if config.get("output_type") == "loglikelihood_rolling" and entry.prompt != "doc_to_target":
        return ["a perplexity task scores its doc_to_target"]
    prompt = part_reads(config, entry.prompt)
    answer = set().union(*(part_reads(config, p).fields for p in PARTS if p != entry.prompt))
    found = []
    for spec in entry.fields:
        if spec.name not in prompt.fields:
            found.append(f"{spec.name!r} is not read by {entry.prompt} ({sorted(prompt.fields)})")
        if spec.name in answer and not spec.protects:
            found.append(f"{spec.name!r} is read by the target or the choices")
    return found


def test_every_key_names_lm_eval_tasks_and_decides_some(covered) -> None:
    dead = [key for key, tasks in covered.items() if not tasks]
    assert not dead, f"entries no task resolves to (absent, or shadowed by nearer ones): {dead}"


def test_every_field_is_read_by_the_prompt_and_is_not_the_answer(posgen_tm, covered) -> None:
    bad = []
    for key, entry in KNOWN.items():
        for task in covered[key]:
            config = posgen_tm.task_index[task].cfg
            bad += [f"{key} -> {task}: {p}" for p in problems_of(entry, config)]
    assert not bad, "\n".join(bad)
    assert sum(len(covered[k]) for k in KNOWN) > 900  # mmlu, bbh, xnli, ... all checked


def test_the_check_catches_a_wrong_entry(posgen_tm) -> None:
    """The table test can fail: a field the prompt does not read, a target field, a
    perplexity task read from the wrong part."""
    from posgen.tasks.field_spec import FieldSpec

    gsm8k = posgen_tm.task_index["gsm8k"].cfg
    assert problems_of(ContentEntry((FieldSpec("question"),)), gsm8k) == []
    wrong = ContentEntry((FieldSpec("answer"), FieldSpec("passage")))
    assert problems_of(wrong, gsm8k) == [
        "'answer' is not read by doc_to_text (['question'])",
        "'answer' is read by the target or the choices",
        "'passage' is not read by doc_to_text (['question'])",
    ]
    lam = posgen_tm.task_index["lambada_openai"].cfg
    assert problems_of(ContentEntry((FieldSpec("text"),)), lam) == [
        "'text' is read by the target or the choices"
    ]
    wikitext = posgen_tm.task_index["wikitext"].cfg
    assert problems_of(ContentEntry((FieldSpec("page"),)), wikitext) == [
        "a perplexity task scores its doc_to_target"
    ]


def test_functions_in_the_table_are_read_completely(posgen_tm, covered) -> None:
    """Tasks whose doc_to_text is a Python function: every read of the doc is visible."""
    seen = {}
    for key, entry in KNOWN.items():
        for task in covered[key]:
            reads = part_reads(posgen_tm.task_index[task].cfg, entry.prompt)
            if reads.form in ("function", "method"):
                seen[task] = (reads.fields, reads.complete)
    assert {t for t, (_, ok) in seen.items() if not ok} == set()
    assert seen["race"][0] == {"article", "problems"}
    assert seen["leaderboard_mmlu_pro"][0] == {"question", "options"}
    assert seen["squadv2"][0] == {"title", "context", "question"}
    assert seen["coqa"][0] == {"story", "questions", "answers"}


@pytest.mark.parametrize(
    ("task", "key"),
    [
        ("mmlu_anatomy", "mmlu"),
        ("mmlu_high_school_us_history", "mmlu"),
        ("mmlu_anatomy_generative", "mmlu_generative"),
        ("bbh_cot_fewshot_navigate", "bbh"),
        ("bbh_zeroshot_navigate", "bbh_zeroshot"),
        ("leaderboard_bbh_navigate", "leaderboard_bbh"),
        ("xnli_de", "xnli"),
        ("gpqa_diamond_cot_zeroshot", "gpqa"),
        ("arc_de", "arc_multilingual"),
    ],
)
def test_a_subtask_inherits_its_group_or_tag(posgen_tm, task, key) -> None:
    choice = posgen_tm.content_fields(task)
    assert (choice.how, choice.source, choice.fields) == ("known", key, KNOWN[key].fields)
    assert f"entry {key!r}" in choice.describe()


def test_a_perturbed_group_carries_the_inherited_fields(posgen_tm) -> None:
    name = "perm_swap_5pct_mmlu_stem"
    assert posgen_tm.match_tasks([name]) == [name]
    cfg = posgen_tm.task_config("perm_swap_5pct_mmlu_anatomy")
    assert cfg["posgen_perturbation"]["fields"] == [{"name": "question"}]
    assert cfg["metadata"]["posgen_content_fields"] == {
        "fields": [{"name": "question"}],
        "how": "known",
        "source": "mmlu",
    }


def test_refused_tasks_say_why(posgen_tm) -> None:
    from posgen.tasks.content_fields import UnknownContentFields

    with pytest.raises(UnknownContentFields, match="word index"):
        posgen_tm.content_fields("wsc")
    chosen = posgen_tm.content_fields("wsc", ["text"], "--fields")
    assert chosen.how == "metadata" and chosen.describe().endswith("as chosen with --fields")


def test_docs_list_the_table() -> None:
    text = DOCS.read_text(encoding="utf-8")
    block = re.search(
        r"<!-- content-fields:start -->\n(.*?)<!-- content-fields:end -->", text, re.S
    )
    assert block is not None, "docs/tasks.md lost its content-fields markers"
    assert block.group(1) == markdown_table(), (
        "docs/tasks.md's table differs from posgen.tasks.content_fields_table; paste "
        "markdown_table() between the markers"
    )
