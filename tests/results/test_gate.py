"""The regression gate on planted runs (unit tier: synthetic lm-eval output, no model)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest
from synthetic_run import cli, make_run

MODEL = {"embedded": {"sensitivity": 1.0, "fit": 0.6}}


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    root = tmp_path_factory.mktemp("gate")
    make_run(root / "base", MODEL, seed=1)
    path = root / "baseline.json"
    assert cli(["baseline", str(root / "base"), "-o", str(path)]) == 0
    return path


def test_baseline_file_is_versioned_and_holds_uncertainty(baseline):
    data = json.loads(baseline.read_text())
    assert data["kind"] == "posgen-baseline" and data["baseline_version"] == 1
    assert data["model"] == "embedded"
    e = data["entries"][0]
    assert {
        "task",
        "metric",
        "kind",
        "scheme",
        "rate",
        "degradation",
        "stderr",
        "ci_lo",
        "ci_hi",
        "n",
    } <= set(e)
    assert all(x["stderr"] > 0 for x in data["entries"] if x["degradation"] > 0)
    assert {"tolerance", "tolerance_lo", "tolerance_hi", "auc"} <= set(data["tolerance"][0])


def test_same_model_other_perturbation_seed_passes(baseline, tmp_path, capsys):
    make_run(tmp_path / "rerun", MODEL, seed=2)
    xml_path = tmp_path / "gate.xml"
    code = cli(
        [
            "check",
            str(tmp_path / "rerun"),
            "--baseline",
            str(baseline),
            "--junit-xml",
            str(xml_path),
        ]
    )
    out = capsys.readouterr().out
    assert code == 0, out
    assert "0 of" in out and "FAIL" not in out
    suite = ET.parse(xml_path).getroot()
    assert suite.get("failures") == "0" and int(suite.get("tests")) > 10


def test_a_less_tolerant_model_fails(baseline, tmp_path, capsys):
    make_run(tmp_path / "weak", {"embedded": {"sensitivity": 1.6, "fit": 0.6}}, seed=2)
    xml_path = tmp_path / "gate.xml"
    code = cli(
        ["check", str(tmp_path / "weak"), "--baseline", str(baseline), "--junit-xml", str(xml_path)]
    )
    out = capsys.readouterr().out
    assert code == 1, out
    assert "FAIL" in out
    suite = ET.parse(xml_path).getroot()
    assert int(suite.get("failures")) > 0
    assert suite.find("testcase/failure") is not None


def test_a_huge_tolerance_lets_the_weak_model_pass(baseline, tmp_path):
    make_run(tmp_path / "weak", {"embedded": {"sensitivity": 1.6, "fit": 0.6}}, seed=2)
    assert (
        cli(["check", str(tmp_path / "weak"), "--baseline", str(baseline), "--tolerance", "10"])
        == 0
    )


@pytest.mark.parametrize(
    "content,message",
    [
        (None, "baseline not found"),
        ("{oops", "not valid JSON"),
        ('{"kind": "something-else"}', "not a posgen baseline"),
        ('{"kind": "posgen-baseline", "baseline_version": 1, "entries": []}', "corrupt"),
    ],
)
def test_invalid_baseline_exits_2_with_a_message(baseline, tmp_path, capsys, content, message):
    path = tmp_path / "b.json"
    if content is not None:
        path.write_text(content)
    make_run(tmp_path / "run", MODEL, seed=2)
    assert cli(["check", str(tmp_path / "run"), "--baseline", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_mismatched_suite_or_rates_exit_2(baseline, tmp_path, capsys):
    make_run(tmp_path / "other", MODEL, seed=2, suite="custom")
    assert cli(["check", str(tmp_path / "other"), "--baseline", str(baseline)]) == 2
    assert "suite mismatch" in capsys.readouterr().err
    data = json.loads(baseline.read_text())
    data["entries"][0]["rate"] = 0.33
    edited = tmp_path / "edited.json"
    edited.write_text(json.dumps(data))
    make_run(tmp_path / "run", MODEL, seed=2)
    assert cli(["check", str(tmp_path / "run"), "--baseline", str(edited)]) == 2
    assert "do not cover the same" in capsys.readouterr().err


def test_missing_run_folder_exits_2(baseline, tmp_path, capsys):
    assert cli(["check", str(tmp_path / "nope"), "--baseline", str(baseline)]) == 2
    assert "run folder not found" in capsys.readouterr().err


def test_a_run_with_several_models_needs_model(tmp_path, capsys):
    make_run(tmp_path / "two", {"a": {"sensitivity": 1.0}, "b": {"sensitivity": 1.0}})
    assert cli(["baseline", str(tmp_path / "two"), "-o", str(tmp_path / "x.json")]) == 2
    assert "--model" in capsys.readouterr().err
    assert (
        cli(["baseline", str(tmp_path / "two"), "-o", str(tmp_path / "x.json"), "--model", "b"])
        == 0
    )
