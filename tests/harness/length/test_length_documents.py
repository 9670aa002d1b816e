"""``posgen length`` on the user's documents: a folder of .txt files, JSONL, a saved
dataset; short documents skipped and counted; other documents refused on a rerun and in
the gate (integration tier, tiny model with a 64-token trained context)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from posgen.harness.cli import main as cli_main
from posgen.harness.length.documents import DocumentError, parse_dataset_spec
from tiny_models import build_short_context_model, build_tokenizer, training_text

pytestmark = pytest.mark.heavy

C = 64


@pytest.fixture(scope="module")
def short_model(tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("short-model")
    build_short_context_model("llama", max_positions=C).save_pretrained(path)
    build_tokenizer().save_pretrained(path)
    return path


def _texts() -> list[str]:
    """Three long texts (well over 2C tokens) and one short one, in that order."""
    pages = training_text()
    return [" ".join(pages[i : i + 3]) for i in (0, 3, 6)] + ["Too short."]


def _length(model: Path, out: Path, *source: str) -> int:
    argv = ["length", "--model", str(model), "--schemes", "none", "--bucket-width", "16"]
    return cli_main([*argv, "--device", "cpu", "--out", str(out), *source])


def _config(out: Path) -> dict:
    return json.loads((out / "config.json").read_text())["config"]


def test_a_folder_of_text_files_with_a_short_one_skipped(short_model, tmp_path, capsys):
    data = tmp_path / "docs"
    (data / "sub").mkdir(parents=True)
    for name, text in zip(["a.txt", "b.txt", "sub/c.txt", "short.txt"], _texts(), strict=True):
        (data / name).write_text(text, encoding="utf-8")
    (data / "ignored.md").write_text(_texts()[0])
    out = tmp_path / "run"
    assert _length(short_model, out, "--data", str(data)) == 0
    assert "skipped 1 document(s) shorter than 128 tokens" in capsys.readouterr().err
    config = _config(out)
    assert [d.split("@")[0] for d in config["documents"]] == ["a.txt", "b.txt", "sub/c.txt"]
    assert config["skipped_documents"] == 1
    import hashlib

    for doc, path in zip(config["documents"], ["a.txt", "b.txt", "sub/c.txt"], strict=True):
        digest = hashlib.sha256((data / path).read_bytes()).hexdigest()
        assert config["document_sources"][doc] == {
            "source": f"file:{(data / path).resolve()}",
            "sha256": digest,
        }
        assert doc.endswith(f"@{digest[:12]}")
    assert len(list((out / "docs").rglob("*.json"))) == 3

    # the same run resumes; the same folder on edited documents is refused
    assert _length(short_model, out, "--data", str(data)) == 0
    capsys.readouterr()
    (data / "b.txt").write_text(_texts()[2] + " An added sentence.", encoding="utf-8")
    assert _length(short_model, out, "--data", str(data)) == 2
    assert "another config" in capsys.readouterr().err


def test_jsonl_with_a_text_field(short_model, tmp_path):
    path = tmp_path / "docs.jsonl"
    rows = [{"id": i, "body": t} for i, t in enumerate(_texts())]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    out = tmp_path / "run"
    assert (
        _length(short_model, out, "--data", str(path), "--text-field", "body", "--documents", "2")
        == 0
    )
    config = _config(out)
    assert [d.split("@")[0] for d in config["documents"]] == ["docs.jsonl:1", "docs.jsonl:2"]
    assert config["document_sources"][config["documents"][1]]["source"].endswith("docs.jsonl:2")


def test_a_saved_dataset(short_model, tmp_path):
    import datasets

    texts = _texts()
    saved = tmp_path / "saved"
    datasets.DatasetDict(
        {
            "train": datasets.Dataset.from_dict({"body": texts[:1]}),
            "test": datasets.Dataset.from_dict({"body": texts[::-1]}),
        }
    ).save_to_disk(str(saved))
    out = tmp_path / "run"
    assert _length(short_model, out, "--dataset", f"{saved}:test:body") == 0
    config = _config(out)
    assert [d.split("@")[0] for d in config["documents"]] == ["test:1", "test:2", "test:3"]
    assert config["skipped_documents"] == 1  # test:0 is the short one
    source = config["document_sources"][config["documents"][0]]["source"]
    assert source == f"dataset:{saved}:test[1].body"


def test_the_gate_refuses_a_run_on_other_documents(short_model, tmp_path):
    from posgen.harness.loading import model_entries
    from posgen.results.folder.store import slug
    from posgen.results.gate.check import GateInputError
    from posgen.results.gate.length import length_pairs, length_section

    (entry,) = model_entries([str(short_model)])
    sections = []
    for k, texts in enumerate((_texts()[:2], _texts()[1:3])):
        data = tmp_path / f"docs{k}"
        data.mkdir()
        for i, text in enumerate(texts):
            (data / f"{i}.txt").write_text(text, encoding="utf-8")
        root = tmp_path / f"run{k}"
        assert _length(short_model, root / "length" / slug(entry.label), "--data", str(data)) == 0
        sections.append(length_section(root, entry.label))
    assert length_pairs(sections[0], sections[0])
    with pytest.raises(GateInputError, match="documents"):
        length_pairs(sections[0], sections[1])


@pytest.mark.parametrize(
    ("source", "message"),
    [
        (["--data", "/no/such/docs"], "no such file or folder"),
        (["--dataset", "pg19"], "give NAME[:CONFIG]:SPLIT[:FIELD]"),
        (["--dataset", "no-org/no-such-set:test"], "datasets cache"),
        (["--text-field", "body"], "--text-field applies to --data JSONL or --dataset only"),
        (["--max-length", "1000000"], "need 5 document(s) of at least --max-length 1000000"),
    ],
)
def test_bad_document_input_is_one_line_and_exit_2(short_model, tmp_path, capsys, source, message):
    out = tmp_path / "run"
    assert _length(short_model, out, *source) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and message in err, err
    assert not out.exists()


def test_bad_files_are_refused(short_model, tmp_path, capsys):
    empty = tmp_path / "empty"
    empty.mkdir()
    jsonl = tmp_path / "x.jsonl"
    jsonl.write_text('{"text": "a"}\n{"body": "b"}\n')
    for source, message in [
        (["--data", str(empty)], "holds no .txt file"),
        (["--data", str(jsonl)], "line 2: no text field 'text'"),
        (["--data", str(empty), "--text-field", "t"], "holds no .txt file"),
    ]:
        assert _length(short_model, tmp_path / "run", *source) == 2
        assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    ("spec", "parsed"),
    [
        ("pg19:test", ("pg19", None, "test", "text")),
        ("pg19:test:body", ("pg19", None, "test", "body")),
        ("wikitext:wikitext-103-raw-v1:test", ("wikitext", "wikitext-103-raw-v1", "test", "text")),
        ("w:cfg:validation:page", ("w", "cfg", "validation", "page")),
    ],
)
def test_dataset_specs(spec, parsed):
    assert parse_dataset_spec(spec, None) == parsed


def test_a_bad_dataset_spec_is_refused():
    with pytest.raises(DocumentError):
        parse_dataset_spec("a:b:c:d:e", None)
