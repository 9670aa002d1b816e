"""The evidence-depth field protocol: declared in a task's YAML, checked on every document
as the task loads, refused in one line (unit and integration tiers: no model)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from posgen.tasks import depth_protocol as protocol
from posgen.tasks.depth_protocol import DepthFields, DepthTaskError

ROOT = Path(__file__).resolve().parents[2]
FIELDS = DepthFields("docs", "gold_index", "question")
GOOD = {"docs": ["first passage.", "second passage.", "third."], "gold_index": 1, "question": "q?"}


def docs_yaml() -> str:
    """The worked task YAML of docs/depth.md, as the page shows it."""
    text = (ROOT / "docs" / "depth.md").read_text(encoding="utf-8")
    m = re.search(
        r"<!-- depth-yaml:start -->\n```yaml\n(.*?)```\n<!-- depth-yaml:end -->", text, re.S
    )
    assert m is not None, "docs/depth.md lost its worked YAML block"
    return m.group(1)


def write_task(folder: Path, name: str, docs: list[dict], yaml_text: str | None = None) -> None:
    """A task ``name`` in ``folder``: the docs' YAML (or ``yaml_text``) renamed, reading
    its documents from ``folder/<name>.jsonl`` (the docs' own task keeps its relative
    path: the tests run in ``folder``)."""
    text = yaml_text or docs_yaml()
    if name != "my_depth_qa":
        text = text.replace("my_depth_qa", name).replace(
            f"{name}.jsonl", str(folder / f"{name}.jsonl")
        )
    (folder / f"{name}.yaml").write_text(text, encoding="utf-8")
    lines = "".join(json.dumps({**d, "answer": "yes"}) + "\n" for d in docs)
    (folder / f"{name}.jsonl").write_text(lines, encoding="utf-8")


def without_protocol(text: str) -> str:
    plain = re.sub(r"  posgen_depth:\n(    .*\n)+", "", text)
    assert "posgen_depth" not in plain
    return plain


@pytest.fixture(scope="module")
def folder(tmp_path_factory) -> Path:
    """Tasks of one's own: the docs' worked task and variants of it."""
    folder = tmp_path_factory.mktemp("depth-tasks")
    write_task(folder, "my_depth_qa", [GOOD, {**GOOD, "gold_index": 2}])
    write_task(folder, "my_one_passage", [GOOD, {**GOOD, "docs": ["only one"], "gold_index": 0}])
    write_task(folder, "my_stray_index", [GOOD, {**GOOD, "gold_index": 7}])
    write_task(folder, "my_plain_qa", [GOOD], without_protocol(docs_yaml()))
    records = docs_yaml().replace(
        "test_split: test\n", "test_split: test\nprocess_docs: !function utils.to_strings\n"
    )
    write_task(
        folder, "my_records_qa", [{**GOOD, "docs": [{"text": p} for p in GOOD["docs"]]}], records
    )
    (folder / "utils.py").write_text(
        "def to_strings(docs):\n"
        "    return docs.map(lambda d: {'docs': [p['text'] for p in d['docs']]})\n",
        encoding="utf-8",
    )
    return folder


@pytest.fixture(scope="module")
def tm(folder):
    """posgen's task manager over those tasks and posgen's own (not lm-eval's: seconds)."""
    from posgen.tasks.lm_eval_tasks import PosgenTaskManager

    return PosgenTaskManager(include_path=str(folder), include_defaults=False)


# ----------------------------------------------------------------------- declaration
def test_a_declaration_is_read_from_the_task_metadata() -> None:
    meta = {
        "version": 1,
        "posgen_depth": {"passages": "docs", "evidence": "gold_index", "question": "question"},
    }
    assert protocol.declared_fields("t", meta) == FIELDS
    assert protocol.declared_fields("t", {"version": 1}) is None
    assert protocol.declared_fields("t", None) is None


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("docs", "must be a mapping"),
        ({"passages": "docs", "evidence": "e"}, "does not name the question field"),
        ({"passages": "docs", "evidence": "e", "question": "q", "answer": "a"}, "unknown key"),
        ({"passages": "", "evidence": "e", "question": "q"}, "does not name the passages"),
    ],
)
def test_a_malformed_declaration_is_refused_in_one_line(spec, match) -> None:
    with pytest.raises(DepthTaskError, match=match) as err:
        protocol.declared_fields("mytask", {"posgen_depth": spec})
    assert "\n" not in str(err.value) and "'mytask'" in str(err.value)


# -------------------------------------------------------------------------- documents
@pytest.mark.parametrize(
    ("change", "match"),
    [
        ({"docs": None}, r"no field 'docs' \(metadata.posgen_depth.passages\)"),
        ({"docs": "one string"}, "'docs' .* is a str, not a list of strings"),
        ({"docs": ["a", 3]}, "holds items that are not strings"),
        ({"docs": ["only one"], "gold_index": 0}, "1 passage in field 'docs'.*at least 2"),
        ({"gold_index": 3}, "evidence index 3 in field 'gold_index' is outside the 3 passages"),
        ({"gold_index": "1"}, "'gold_index' .* not an int index"),
        ({"gold_index": True}, "'gold_index' .* not an int index"),
        ({"question": ["q"]}, "'question' .* is a list, not a string"),
    ],
)
def test_each_bad_document_is_refused_naming_the_task_doc_and_field(change, match) -> None:
    doc = {k: v for k, v in {**GOOD, **change}.items() if v is not None}
    with pytest.raises(DepthTaskError, match=match) as err:
        protocol.check_doc("mytask", FIELDS, doc, "test:4")
    assert "\n" not in str(err.value) and "task 'mytask', doc test:4" in str(err.value)


def test_canonical_fields_of_a_good_document() -> None:
    protocol.check_doc("t", FIELDS, GOOD, "0")
    assert protocol.canonical_fields(FIELDS, GOOD) == {
        "posgen_passages": GOOD["docs"],
        "posgen_evidence": 1,
        "posgen_question": "q?",
        "posgen_evidence_depth": 0.5,
    }


def test_block_bounds_in_a_rendered_context() -> None:
    context = "Read.\n\nalpha one.\n\nbeta two.\n\ngamma.\n\nQuestion: beta?"
    bounds = protocol.passage_char_bounds(context, ["alpha one.", "beta two.", "gamma."], "beta?")
    assert bounds == [7, 19, 30, 48]  # the last block owns "\n\nQuestion: ", the question
    assert context[bounds[1] : bounds[2]] == "beta two.\n\n"  # starts after the passages
    with pytest.raises(ValueError, match="passage 1 of 2 is not in the rendered context"):
        protocol.passage_char_bounds(context, ["gamma.", "alpha one."], "beta?")
    # a token that straddles a bound belongs to the block it starts in
    assert protocol.token_bounds(bounds, [0, 5, 8, 13, 17, 19, 24, 30, 37, 48]) == [
        2,
        5,
        7,
        9,
    ]
    with pytest.raises(ValueError, match="hold no token"):
        protocol.token_bounds([7, 8, 30], [0, 7, 30])


# ------------------------------------------------------- the worked YAML of the docs
def test_the_docs_worked_yaml_loads_checks_and_moves(folder, tm, monkeypatch) -> None:
    monkeypatch.chdir(folder)
    assert (folder / "my_depth_qa.yaml").read_text(encoding="utf-8") == docs_yaml()
    tasks = tm.load(["my_depth_qa", "perm_depth_0pct_my_depth_qa"])["tasks"]
    base, moved = tasks["my_depth_qa"], tasks["perm_depth_0pct_my_depth_qa"]
    doc = base.eval_docs[1]
    assert doc["posgen_passages"] == GOOD["docs"] and doc["posgen_evidence"] == 2
    assert doc["posgen_question"] == "q?" and doc["posgen_doc_id"] == "test:1"
    assert base.doc_to_text(doc).startswith("Answer the question from the documents.\n\n")
    new = moved.eval_docs[1]
    assert new["docs"] == ["third.", "first passage.", "second passage."]  # evidence first
    assert new["gold_index"] == 0 == new["posgen_evidence"] and new["posgen_depth_source"] == 2
    text = moved.doc_to_text(new)
    assert text.index("third.") < text.index("first passage.") < text.index("second passage.")
    bounds = protocol.passage_char_bounds(text, new["posgen_passages"], new["posgen_question"])
    assert text[bounds[0] :].startswith("third.") and text[bounds[-1] :] == "q?\nAnswer:"
    record = moved.config.metadata["posgen"]
    assert record["fields"] == FIELDS.to_dict() and record["depth_stats"]["n_moved"] == 2


@pytest.mark.parametrize(
    ("task", "match"),
    [
        ("my_one_passage", "doc test:1: 1 passage in field 'docs'"),
        ("my_stray_index", "doc test:1: evidence index 7 .* outside the 3 passages"),
    ],
)
def test_a_bad_document_stops_the_task_as_it_loads(tm, task, match) -> None:
    for name in (task, f"perm_depth_50pct_{task}"):
        with pytest.raises(DepthTaskError, match=f"task '{name}', {match}"):
            tm.load([name])
        with pytest.raises(DepthTaskError, match=match):  # before a model: as names match
            tm.match_tasks([name])


def test_a_task_without_the_protocol_is_refused_with_what_to_add(tm) -> None:
    tm.load(["my_plain_qa"])  # the plain task loads as it is
    for name in ("perm_depth_50pct_my_plain_qa", "perm_depth_50pct_posgen_cloze"):
        with pytest.raises(DepthTaskError) as err:
            tm.match_tasks([name])
        message = str(err.value)
        assert "\n" not in message and "add to its YAML: metadata: {posgen_depth:" in message


def test_the_base_tasks_process_docs_runs_first(tm) -> None:
    """A task whose passages are records, mapped to strings by its own process_docs."""
    (moved,) = tm.load(["perm_depth_100pct_my_records_qa"])["tasks"].values()
    assert moved.eval_docs[0]["docs"] == ["first passage.", "third.", "second passage."]
