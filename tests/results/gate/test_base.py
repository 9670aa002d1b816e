"""The gate's unperturbed cells: a model worse at base must not pass as "more tolerant"
(unit tier: planted runs, no model)."""

from __future__ import annotations

import json
import math
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from synthetic_run import cli, edited_baseline, make_run

MODEL = {"embedded": {"sensitivity": 1.0, "fit": 0.6}}
# less sensitive to every perturbation, but every document's NLL per word 0.03 (x 0.5 to
# 1.5) higher unperturbed: PPL_base about +3 %, so every ratio PPL_pert/PPL_base falls
DAMAGED = {"embedded": {"sensitivity": 0.7, "fit": 0.6, "base_shift": 0.03}}


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("gate_base")
    make_run(root / "base", MODEL, seed=1)
    make_run(root / "damaged", DAMAGED, seed=1)
    assert cli(["baseline", str(root / "base"), "-o", str(root / "baseline.json")]) == 0
    return root


def test_the_baseline_stores_each_tasks_unperturbed_values(runs):
    data = json.loads((runs / "baseline.json").read_text())
    base = {e["task"]: e for e in data["base"]}
    assert sorted(base) == ["posgen_cloze", "posgen_prose"]
    prose, cloze = base["posgen_prose"], base["posgen_cloze"]
    assert prose["metric"] == "word_perplexity" and cloze["metric"] == "acc"
    assert len(prose["docs"]["keys"]) == 30 and len(cloze["docs"]["keys"]) == 60
    w, v = np.array(prose["docs"]["w"]), np.array(prose["docs"]["v"])
    assert (w >= 40).all() and (v < 0).all()  # words; loglikelihood per word
    assert prose["value"] == pytest.approx(math.exp(-(w * v).sum() / w.sum()))
    assert set(cloze["docs"]["v"]) <= {0.0, 1.0} and cloze["docs"]["w"] == [1.0] * 60
    assert cloze["value"] == pytest.approx(np.mean(cloze["docs"]["v"]))


def test_more_tolerant_but_worse_at_base_fails_on_the_unperturbed_cell(runs, tmp_path, capsys):
    xml_path = tmp_path / "gate.xml"
    run = ["check", str(runs / "damaged"), "--baseline", str(runs / "baseline.json")]
    assert cli([*run, "--junit-xml", str(xml_path)]) == 1
    out = capsys.readouterr().out
    failed = [line for line in out.splitlines() if line.endswith("FAIL")]
    assert len(failed) == 1 and "unperturbed" in failed[0], out
    assert failed[0].split()[:2] == ["posgen_prose", "word_perplexity"]
    assert "% PPL" in failed[0]
    assert "posgen_prose: more tolerant but worse at base: 8 of 8 perturbed cells" in out
    assert "PPL_pert/PPL_base falls when PPL_base rises" in out
    assert "8 of them beyond noise, interval below 0" in out
    bad = [
        t for t in ET.parse(xml_path).getroot().iter("testcase") if t.find("failure") is not None
    ]
    assert [t.get("name") for t in bad] == ["posgen_prose/word_perplexity/none"]
    assert "% PPL" in bad[0].find("failure").get("message")


def test_the_same_damage_passes_within_a_wide_base_margin_and_says_so(runs, capsys):
    run = ["check", str(runs / "damaged"), "--baseline", str(runs / "baseline.json")]
    assert cli([*run, "--margin-base-ppl", "10"]) == 0
    out = capsys.readouterr().out
    assert "more tolerant but worse at base" in out and "(within its margin)" in out


def test_the_unperturbed_cells_come_first_and_are_in_the_holm_family(runs, capsys):
    assert cli(["check", str(runs / "base"), "--baseline", str(runs / "baseline.json")]) == 0
    out = capsys.readouterr().out
    lines = out.splitlines()
    assert lines[2].split()[:3] == ["posgen_cloze", "acc", "unperturbed"]
    assert "Holm over 18 cells" in out and "more tolerant" not in out


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda d: d.pop("base"), "missing key 'base'"),
        (lambda d: d.__setitem__("base", []), "'base' should be a non-empty list"),
        (lambda d: d["base"][0].__setitem__("value", "x"), "'value' should be float"),
        (lambda d: d["base"][0]["docs"].__setitem__("v", [0.1]), "same length"),
        (lambda d: d["base"][0]["docs"].pop("v"), "needs lists"),
        (lambda d: d["base"].append(dict(d["base"][0])), "a (task, metric) repeats"),
        (lambda d: d["base"].pop(), "do not cover the same unperturbed cells"),
        (lambda d: d["base"][1]["docs"]["keys"].__setitem__(0, "x"), "other documents"),
        (lambda d: d["base"][0].__setitem__("metric", "bleu"), "no margin for metric 'bleu'"),
    ],
)
def test_a_malformed_or_unpaired_base_section_exits_2(runs, tmp_path, capsys, edit, message):
    path = edited_baseline(runs / "baseline.json", tmp_path, edit)
    assert cli(["check", str(runs / "base"), "--baseline", str(path)]) == 2
    err = capsys.readouterr().err
    assert message in err and len(err.strip().splitlines()) == 1, err
