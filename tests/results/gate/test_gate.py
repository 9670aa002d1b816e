"""The regression gate on planted runs (unit tier: synthetic lm-eval output, no model)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from synthetic_run import cli, edited_baseline, make_run

pytestmark = pytest.mark.heavy

MODEL = {"embedded": {"sensitivity": 1.0, "fit": 0.6}}


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    root = tmp_path_factory.mktemp("gate")
    make_run(root / "base", MODEL, seed=1)
    path = root / "baseline.json"
    assert cli(["baseline", str(root / "base"), "-o", str(path)]) == 0
    return path


def test_baseline_file_holds_per_document_values_of_the_primary_metrics(baseline):
    data = json.loads(baseline.read_text())
    assert data["kind"] == "posgen-baseline" and data["baseline_version"] == 6
    assert data["model"] == "embedded" and data["pairing"]["limits"]
    assert data["pairing"]["seed"] == 1 and data["pairing"]["seeds"] == 1
    assert data["pairing"]["num_fewshot"] is None
    assert data["pairing"]["apply_chat_template"] is False
    assert data["pairing"]["perturbations"] == {
        "feature/rope_noise": 1,
        "position/swap": 1,
        "text/swap": 1,
    }
    assert {c["metric"] for c in data["cells"]} == {"word_perplexity", "acc"}  # one per task
    assert {(c["metric"], c["lm_eval_key"], c["scale"]) for c in data["cells"]} == {
        ("word_perplexity", "word_perplexity,none", "perplexity"),
        ("acc", "acc,none", "accuracy"),
    }
    assert data["not_gated"] == []
    c = next(c for c in data["cells"] if c["metric"] == "word_perplexity")
    assert {"task", "kind", "scheme", "rate", "degradation", "ci_lo", "ci_hi", "n"} <= set(c)
    assert len(c["docs"]["keys"]) == len(c["docs"]["w"]) == len(c["docs"]["g"]) == 30
    assert c["docs"]["g_worst"] == c["docs"]["g"]  # one seed: the worst is the mean
    assert all(w >= 40 for w in c["docs"]["w"])  # words, not 1
    assert {"tolerance", "tolerance_lo", "tolerance_hi", "auc"} <= set(data["tolerance"][0])


def test_same_model_same_seed_passes_with_identical_perturbations(baseline, tmp_path, capsys):
    make_run(tmp_path / "rerun", MODEL, seed=1)
    assert cli(["check", str(tmp_path / "rerun"), "--baseline", str(baseline)]) == 0
    out = capsys.readouterr().out
    assert "0 of 18 cells" in out and "identical perturbations" in out


def test_same_model_other_seed_passes_with_allow_other_seed_naming_the_draw_noise(
    baseline, tmp_path, capsys
):
    make_run(tmp_path / "rerun", MODEL, seed=2)
    xml_path = tmp_path / "gate.xml"
    run = ["check", str(tmp_path / "rerun"), "--baseline", str(baseline)]
    code = cli([*run, "--allow-other-seed", "--junit-xml", str(xml_path)])
    out = capsys.readouterr().out
    assert code == 0, out
    assert "0 of" in out and "FAIL" not in out
    assert "differ in seed 1 vs 2: the comparison includes the perturbation draw's noise" in out
    suite = ET.parse(xml_path).getroot()
    assert suite.get("failures") == "0" and int(suite.get("tests")) > 10
    assert "draw's noise" in suite.find("system-out").text
    # stated power: the cloze cells (60 items, fresh draws) cannot see 5 points
    assert "cannot detect a change of their margin's size" in out
    assert "posgen_cloze/acc/text/swap@0.5: MDE80" in out and "needs about" in out
    case = next(
        t for t in suite.iter("testcase") if t.get("name") == "posgen_cloze/acc/text/swap@0.5"
    )
    props = {p.get("name"): p.get("value") for p in case.iter("property")}
    assert props["power"] == "underpowered" and float(props["mde"]) > float(props["margin"]) * 2
    assert props["unit"] == "points" and "MDE80" in case.find("system-out").text


def test_a_margin_of_0_fails_any_measurable_increase(baseline, tmp_path, capsys):
    make_run(tmp_path / "weak", {"embedded": {"sensitivity": 1.01, "fit": 0.6}}, seed=1)
    run = ["check", str(tmp_path / "weak"), "--baseline", str(baseline)]
    assert cli(run) == 0  # 1 % more sensitive: under 0.6 % of the ratio, inside 2 %
    capsys.readouterr()
    assert cli([*run, "--margin-ppl", "0", "--margin-acc", "0"]) == 1
    out = capsys.readouterr().out
    assert "16 cells have margin 0" in out and "underpowered" not in out


def test_a_less_tolerant_model_fails(baseline, tmp_path, capsys):
    make_run(tmp_path / "weak", {"embedded": {"sensitivity": 1.6, "fit": 0.6}}, seed=1)
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


def test_wide_margins_let_the_weak_model_pass(baseline, tmp_path):
    make_run(tmp_path / "weak", {"embedded": {"sensitivity": 1.6, "fit": 0.6}}, seed=1)
    run = ["check", str(tmp_path / "weak"), "--baseline", str(baseline)]
    assert cli(run) == 1
    assert cli([*run, "--margin-ppl", "100"]) == 1  # the cloze cells still fail
    assert cli([*run, "--margin-ppl", "100", "--margin-acc", "50"]) == 0


def _set(path: str, value):
    def fn(data):
        *head, last = path.split(".")
        obj = data
        for k in head:
            obj = obj[int(k)] if k.isdigit() else obj[k]
        if value is KeyError:
            del obj[last]
        else:
            obj[last] = value

    return fn


@pytest.mark.parametrize(
    "content,message",
    [
        (None, "baseline not found"),
        ("{oops", "not valid JSON"),
        ("[1, 2]", "JSON object"),
        ('{"kind": "posgen-baseline", "baseline_version": 6, "model": NaN}', "should be str"),
        ('{"kind": "something-else"}', "not a posgen baseline"),
        ('{"kind": "posgen-baseline", "baseline_version": 1, "entries": []}', "regenerate"),
        ('{"kind": "posgen-baseline", "baseline_version": 3}', "regenerate it with"),
        ('{"kind": "posgen-baseline", "baseline_version": 4}', "unperturbed per-document"),
        ('{"kind": "posgen-baseline", "baseline_version": 6}', "missing key 'model'"),
        (b"\xff\xfe\x00", "baseline"),
    ],
)
def test_unreadable_or_partial_baseline_exits_2_with_a_message(
    baseline, tmp_path, capsys, content, message
):
    path = tmp_path / "b.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    elif content is not None:
        path.write_text(content)
    make_run(tmp_path / "run", MODEL, seed=1)
    assert cli(["check", str(tmp_path / "run"), "--baseline", str(path)]) == 2
    assert message in capsys.readouterr().err


@pytest.mark.parametrize(
    "edit,message",
    [
        (_set("cells", []), "'cells' is empty"),
        (_set("cells.0.rate", None), "'rate' is null"),
        (_set("cells.0.degradation", "0.1"), "'degradation' should be float"),
        (_set("cells.0.rate", True), "'rate' should be float"),
        (_set("cells.0.docs", KeyError), "missing key 'docs'"),
        (_set("cells.0.docs.g", [0.1]), "same length"),
        (_set("cells.0.docs.w", [None] * 60), "w must be numbers"),
        (_set("pairing.limits", None), "'limits' should be an object"),
        (_set("pairing", KeyError), "missing key 'pairing'"),
        (_set("pairing.seed", KeyError), "missing ['seed']"),
        (_set("cells.0.docs.g_worst", KeyError), "needs lists"),
        (_set("cells.0.docs.g_worst", ["x"] * 60), "must be numbers"),
        (_set("model", 3), "'model' should be str"),
    ],
)
def test_wrongly_typed_baseline_exits_2(baseline, tmp_path, capsys, edit, message):
    path = edited_baseline(baseline, tmp_path, edit)
    make_run(tmp_path / "run", MODEL, seed=1)
    assert cli(["check", str(tmp_path / "run"), "--baseline", str(path)]) == 2
    assert message in capsys.readouterr().err


def test_other_documents_or_limits_exit_2(baseline, tmp_path, capsys):
    make_run(tmp_path / "run", MODEL, seed=1)
    path = edited_baseline(
        baseline, tmp_path, lambda d: d["cells"][0]["docs"]["keys"].__setitem__(0, "x")
    )
    assert cli(["check", str(tmp_path / "run"), "--baseline", str(path)]) == 2
    assert "other documents" in capsys.readouterr().err
    path = edited_baseline(
        baseline, tmp_path, lambda d: d["cells"][0]["docs"]["w"].__setitem__(0, 2.0)
    )
    assert cli(["check", str(tmp_path / "run"), "--baseline", str(path)]) == 2
    assert "lengths differ" in capsys.readouterr().err
    make_run(tmp_path / "limits", MODEL, seed=1, limits={"posgen_prose": 12})
    assert cli(["check", str(tmp_path / "limits"), "--baseline", str(baseline)]) == 2
    assert "limits differs (baseline {" in capsys.readouterr().err


def test_unwritable_junit_xml_exits_2(baseline, tmp_path, capsys):
    make_run(tmp_path / "run", MODEL, seed=1)
    bad = tmp_path / "no" / "such" / "gate.xml"
    args = ["check", str(tmp_path / "run"), "--baseline", str(baseline), "--junit-xml"]
    assert cli([*args, str(bad)]) == 2
    assert "--junit-xml" in capsys.readouterr().err
    assert cli([*args, str(tmp_path)]) == 2  # a folder


@pytest.mark.parametrize(
    "flags,message",
    [
        (["--alpha", "0"], "--alpha must be in (0, 1)"),
        (["--alpha", "nan"], "--alpha must be in (0, 1)"),
        (["--margin-ppl", "-1"], "--margin-ppl must be a finite number >= 0"),
        (["--margin-ppl", "inf"], "--margin-ppl must be a finite number >= 0"),
        (["--margin-acc", "-0.5"], "--margin-acc must be a finite number >= 0"),
        (["--margin-length", "nan"], "--margin-length must be a finite number >= 0"),
        (["--margin-base-ppl", "-0.1"], "--margin-base-ppl must be a finite number >= 0"),
        (["--margin-base-ppl", "inf"], "--margin-base-ppl must be a finite number >= 0"),
        (["--margin-base-acc", "-1"], "--margin-base-acc must be a finite number >= 0"),
        (["--margin-base-acc", "nan"], "--margin-base-acc must be a finite number >= 0"),
        (["--statistic", "median"], "--statistic: 'median'; give mean or worst"),
        (["--tolerance", "0.1"], "--tolerance was removed"),
    ],
)
def test_bad_gate_options_exit_2_before_reading_anything(baseline, capsys, flags, message):
    folder = baseline.parent  # the baseline and its run
    before = sorted(p.name for p in folder.rglob("*"))
    run = ["check", str(folder / "base"), "--baseline", str(baseline)]
    assert cli([*run, *flags, "--junit-xml", str(folder / "gate.xml")]) == 2
    err = capsys.readouterr().err.strip()
    assert message in err and len(err.splitlines()) == 1, err
    assert sorted(p.name for p in folder.rglob("*")) == before  # nothing written


def test_mismatched_rates_exit_2(baseline, tmp_path, capsys):
    edited = edited_baseline(baseline, tmp_path, _set("cells.0.rate", 0.33))
    make_run(tmp_path / "run", MODEL, seed=1)
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


@pytest.mark.parametrize(
    "extra,message",
    [
        ({"seed": 2}, "seed differs (baseline 1, run 2)"),
        ({"suite": "custom"}, "suite differs (baseline {'suite': 'offline'"),
        ({"num_fewshot": 3}, "num_fewshot differs (baseline None, run 3)"),
        ({"apply_chat_template": True}, "apply_chat_template differs (baseline False, run True)"),
    ],
)
def test_a_run_that_cannot_be_paired_is_refused_naming_the_setting(
    baseline, tmp_path, capsys, extra, message
):
    make_run(tmp_path / "run", MODEL, **{"seed": 1, **extra})
    assert cli(["check", str(tmp_path / "run"), "--baseline", str(baseline)]) == 2
    assert message in capsys.readouterr().err


def test_another_perturbation_version_is_refused_even_with_allow_other_seed(
    baseline, tmp_path, capsys
):
    path = edited_baseline(baseline, tmp_path, _set("pairing.perturbations.text/swap", 2))
    make_run(tmp_path / "run", MODEL, seed=1)
    run = ["check", str(tmp_path / "run"), "--baseline", str(path), "--allow-other-seed"]
    assert cli(run) == 2
    assert "perturbations differs (baseline {" in capsys.readouterr().err
    make_run(tmp_path / "other", MODEL, seed=1, suite="custom")  # so is another suite
    assert cli(["check", str(tmp_path / "other"), "--baseline", str(baseline), run[-1]]) == 2
    assert "suite differs" in capsys.readouterr().err


def test_other_seeds_are_refused_and_admitted_with_allow_other_seed(baseline, tmp_path, capsys):
    path = edited_baseline(baseline, tmp_path, _set("pairing.seeds", 2))
    make_run(tmp_path / "run", MODEL, seed=1)
    run = ["check", str(tmp_path / "run"), "--baseline", str(path)]
    assert cli(run) == 2
    assert "seeds differs (baseline 2, run 1)" in capsys.readouterr().err
    assert cli([*run, "--allow-other-seed"]) == 0
    assert "differ in seeds 2 vs 1" in capsys.readouterr().out


def test_require_power_exits_3_when_cells_cannot_see_their_margin(baseline, tmp_path, capsys):
    """The other-seed rerun passes every cell, but its cloze cells cannot detect their
    margin: exit 0 by default (its first line says so), 3 with --require-power, naming
    the documents each needs; the JUnit XML carries the same verdict."""
    make_run(tmp_path / "rerun", MODEL, seed=2)
    run = ["check", str(tmp_path / "rerun"), "--baseline", str(baseline), "--allow-other-seed"]
    assert cli(run) == 0
    first = capsys.readouterr().out.split("\n\n")[1].splitlines()[0]
    assert "0 of 18 cells worse" in first and "could not detect its margin in" in first
    xml_path = tmp_path / "gate.xml"
    assert cli([*run, "--require-power", "--junit-xml", str(xml_path)]) == 3
    out = capsys.readouterr().out
    tail = out.rsplit("\n\n", 1)[1]
    assert "exit 3 (--require-power)" in tail
    assert "posgen_cloze/acc/text/swap@0.5: needs about" in tail and "documents (has 60)" in tail
    suite = ET.parse(xml_path).getroot()
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["verdict"] == "cannot detect margin" and props["exit_status"] == "3"
    blind = int(props["cells_blind_to_margin"])
    assert blind > 0 and suite.get("errors") == str(blind) and suite.get("failures") == "0"
    assert len(suite.findall("testcase/error")) == blind
    assert f"could not detect its margin in {blind} of 18 cells" in first


def test_a_measured_regression_exits_1_with_or_without_require_power(baseline, tmp_path):
    make_run(tmp_path / "weak", {"embedded": {"sensitivity": 1.6, "fit": 0.6}}, seed=1)
    xml_path = tmp_path / "gate.xml"
    run = ["check", str(tmp_path / "weak"), "--baseline", str(baseline)]
    assert cli([*run, "--require-power", "--junit-xml", str(xml_path)]) == 1
    suite = ET.parse(xml_path).getroot()
    props = {p.get("name"): p.get("value") for p in suite.find("properties")}
    assert props["verdict"] == "regression" and props["exit_status"] == "1"
