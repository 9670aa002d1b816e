"""posgen's table of content fields: lm-eval 0.4.13 tasks, groups and tags, and why.

Keys are task, group or tag names; a task without its own key inherits the entry of its
nearest ancestor (its tags, the groups that list it or its tags, the task a YAML
``include``s: :mod:`posgen.tasks.task_ancestry`). Each entry was read off the task's own
YAML and the ``utils.py`` functions it names; ``tests/tasks/test_content_fields_table.py``
checks every task each key covers against lm-eval's task index: every named field is
read by the entry's prompt part, and none is read by the target or the choices unless
the :class:`FieldSpec` keeps that part of it fixed.

What counts as content: the passage and the question the model reads. Scaffold stays:
the template text, answer options (even when the template lists them, as MMLU's
``A. {{choices[0]}}``), the target, few-shot examples, labels and ids.

``prompt``: the config part whose rendering holds the content, ``doc_to_text`` unless
the task scores its text elsewhere: perplexity tasks score ``doc_to_target``; XNLI and
WinoGrande put the whole text in ``doc_to_choice`` (``doc_to_text`` is empty or an index).
"""

from __future__ import annotations

from dataclasses import dataclass

from posgen.tasks.field_spec import FieldSpec


@dataclass(frozen=True)
class ContentEntry:
    """The content fields of a task (or of every task under a group or tag)."""

    fields: tuple[FieldSpec, ...]
    prompt: str = "doc_to_text"
    note: str = ""


def _e(*names: str, prompt: str = "doc_to_text", note: str = "") -> ContentEntry:
    return ContentEntry(tuple(FieldSpec(n) for n in names), prompt, note)


_OPTIONS = "answer options stay"
_QUESTION = _e("question")
_QUESTION_OPTIONS = _e("question", note=_OPTIONS)
_BBH = _e("input")
_MATH = _e("problem")
_LAMBADA = ContentEntry((FieldSpec("text", keep_last=1),), note="final word (the target) kept")
_PAIR = _e("premise", "hypothesis")
_HELLASWAG = ContentEntry((FieldSpec("query", after=": "),), note="after its `<activity label>: `")

# the offline suite and the tasks known before the table grew
_CORE: dict[str, ContentEntry] = {
    "posgen_prose": _e("text", prompt="doc_to_target"),
    "posgen_cloze": _e("context"),
    "wikitext": _e("page", prompt="doc_to_target"),
    "hellaswag": _HELLASWAG,
    "hellaswag_multilingual": _HELLASWAG,
    "arc_easy": _QUESTION,
    "arc_challenge": _QUESTION,
    "arc_challenge_mt": _QUESTION,
    "arc_challenge_chat": _QUESTION_OPTIONS,
    "arc_challenge_llama": _QUESTION_OPTIONS,
    "arc_multilingual": ContentEntry(
        (FieldSpec("query", after="Question: ", before="\nAnswer:"),),
        note="between `Question: ` and `\\nAnswer:`",
    ),
    "piqa": _e("goal"),
    "winogrande": ContentEntry(
        (FieldSpec("sentence", before="_"),),
        prompt="doc_to_choice",
        note="before the blank `_` (the scored continuation stays)",
    ),
    "lambada_openai": _LAMBADA,
    "lambada_standard": _LAMBADA,
    "lambada_cloze": _LAMBADA,
    "lambada_multilingual": _LAMBADA,
    "lambada_multilingual_stablelm": _LAMBADA,
    "boolq": _e("passage", "question"),
}

# the open LLM leaderboard (v2) and the benchmarks behind it
_LEADERBOARD: dict[str, ContentEntry] = {
    "leaderboard_mmlu_pro": _QUESTION_OPTIONS,
    "leaderboard_bbh": _BBH,
    "leaderboard_gpqa": _e("Question", note=_OPTIONS),
    "leaderboard_ifeval": _e("prompt"),
    "leaderboard_math_hard": _MATH,
    "leaderboard_musr": _e("narrative", "question", note=_OPTIONS),
    "mmlu": _QUESTION_OPTIONS,
    "mmlu_continuation": _QUESTION,
    "mmlu_generative": _QUESTION_OPTIONS,
    "mmlu_flan_n_shot_loglikelihood": _QUESTION_OPTIONS,
    "mmlu_flan_n_shot_generative": _QUESTION_OPTIONS,
    "mmlu_flan_cot_fewshot": _QUESTION_OPTIONS,
    "mmlu_flan_cot_zeroshot": _QUESTION_OPTIONS,
    "mmlu_cot_llama": _QUESTION_OPTIONS,
    "mmlu_redux_generative": _QUESTION_OPTIONS,
    "mmlu_redux_spanish_generative": _QUESTION_OPTIONS,
    "mmlu_pro": _QUESTION_OPTIONS,
    "mmlu_pro_llama": _QUESTION_OPTIONS,
    "mmlu_pro_plus": _QUESTION_OPTIONS,
    "bbh": _BBH,
    "bbh_cot_zeroshot": _BBH,
    "bbh_fewshot": _BBH,
    "bbh_zeroshot": _BBH,
    "gpqa": _e("Question", note=_OPTIONS),
    "ifeval": _e("prompt"),
    "minerva_math": _MATH,
    "minerva_math500": _MATH,
    "hendrycks_math": _MATH,
    "hendrycks_math500": _MATH,
}

_GSM8K = {
    f"gsm8k{variant}": _QUESTION
    for variant in (
        "",
        "_cot",
        "_cot_zeroshot",
        "_cot_self_consistency",
        "_cot_llama",
        "_llama",
        "_platinum",
        "_platinum_cot",
        "_platinum_cot_zeroshot",
        "_platinum_cot_self_consistency",
        "_platinum_cot_llama",
    )
}

# question answering, reading comprehension, inference, commonsense
_COMMON: dict[str, ContentEntry] = {
    "truthfulqa": _QUESTION,
    "triviaqa": _QUESTION,
    "nq_open": _QUESTION,
    "webqs": _QUESTION,
    "drop": _e("passage", "question"),
    "squadv2": _e("context", "question", note="the title stays"),
    "squad_completion": _e("text"),
    "coqa": _e("story", note="the dialogue so far stays"),
    "race": _e("article", note="its earlier questions and answers stay"),
    "logiqa": _e("context", "question", note=_OPTIONS),
    "logiqa2": _e("text", "question", note=_OPTIONS),
    "medqa_4options": _e("sent1", note=_OPTIONS),
    "headqa": _e("qtext"),
    "mathqa": _e("Problem"),
    "openbookqa": _e("question_stem"),
    "sciq": _e("support", "question"),
    "commonsense_qa": _QUESTION_OPTIONS,
    "social_iqa": _e("context", "question"),
    "swag": _e("startphrase"),
    "copa": ContentEntry(
        (FieldSpec("premise", keep_last=1),),
        note="final word kept: the prompt drops the premise's last character (its period)",
    ),
    "cb": _PAIR,
    "anli": _PAIR,
    "mnli": _PAIR,
    "mnli_mismatch": _PAIR,
    "xnli": _e(
        "premise", "hypothesis", prompt="doc_to_choice", note="each choice is the whole text"
    ),
    "rte": _e("sentence1", "sentence2"),
    "wnli": _e("sentence1", "sentence2"),
    "mrpc": _e("sentence1", "sentence2"),
    "qqp": _e("question1", "question2"),
    "qnli": _e("question", "sentence"),
    "sst2": _e("sentence"),
    "multirc": _e("paragraph", "question", note="the candidate answer stays"),
    "wic": _e(
        "sentence2",
        note="sentence1 stays: the prompt cuts the word asked about from it by "
        "character offsets (start1, end1)",
    ),
}

KNOWN: dict[str, ContentEntry] = {**_CORE, **_LEADERBOARD, **_GSM8K, **_COMMON}

# tasks whose prompt breaks if their content moves: posgen refuses them unless the
# fields are chosen explicitly
REFUSED: dict[str, str] = {
    "wsc": "its prompt marks the pronoun by word index (span2_index) into `text`",
    "wsc273": "its choices and target cut `text` at a character offset (pronoun_loc)",
    "cola": "its label is whether the sentence is grammatical, which word order decides",
}


def markdown_table() -> str:
    """The table as Markdown (docs/tasks.md carries it; a test keeps the two equal)."""
    rows = ["| task, group or tag | content fields | notes |", "| --- | --- | --- |"]
    for key, entry in KNOWN.items():
        names = ", ".join(f"`{f.name}`" for f in entry.fields)
        where = "" if entry.prompt == "doc_to_text" else f"read by its `{entry.prompt}`"
        notes = "; ".join(n for n in (entry.note, where) if n).replace("\n", "\\n")
        rows.append(f"| {key} | {names} | {notes} |")
    for key, reason in REFUSED.items():
        rows.append(f"| {key} | refused | {reason} |")
    return "\n".join(rows) + "\n"
