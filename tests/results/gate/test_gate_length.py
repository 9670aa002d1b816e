"""The regression gate's length cells on planted run folders (unit tier: no model).

Each run is a synthetic sweep (synthetic_run.make_run) plus a planted
``RUN/length/<model>/`` folder (synthetic_run.add_length)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import numpy as np
import pytest

from synthetic_run import (
    LENGTH_EXCESS,
    LENGTH_SCHEMES,
    add_length,
    cli,
    edited_baseline,
    make_run,
)

pytestmark = pytest.mark.heavy

MODEL = {"embedded": {"sensitivity": 1.0, "fit": 0.6}}


def _run(path, draw: int, **length):
    """A planted sweep (same seed as the baseline's: identical perturbations) and length
    folder; ``draw`` seeds the length run's noise (a retrained checkpoint's)."""
    make_run(path, MODEL, seed=1)
    if length.pop("with_length", True):
        add_length(path, "embedded", draw=draw, **length)
    return path


@pytest.fixture(scope="module")
def baseline(tmp_path_factory):
    root = tmp_path_factory.mktemp("gate_length")
    _run(root / "base", draw=1)
    path = root / "baseline.json"
    assert cli(["baseline", str(root / "base"), "-o", str(path)]) == 0
    return path


def _check(run, baseline, *extra):
    return cli(["check", str(run), "--baseline", str(baseline), *extra])


def test_baseline_stores_each_schemes_per_document_excess_past_c_and_the_settings(baseline):
    data = json.loads(baseline.read_text())
    assert data["baseline_version"] == 6
    length = data["length"]
    assert length["settings"] == {
        "max_length": 128,
        "trained_context": 64,
        "schemes": list(LENGTH_SCHEMES),
        "documents": [f"doc-{i}" for i in range(6)],
        "bucket_width": 16,
        "seed": 1234,
        "positions": None,
    }
    assert [c["scheme"] for c in length["cells"]] == list(LENGTH_SCHEMES)
    fixed = np.random.default_rng(7)
    fixed.normal(3.0, 0.3, 6)
    factor = fixed.uniform(0.5, 1.5, 6)
    in_context = 0.5 * (1 / 3 + 1 / 4) / 2  # the planted curve over the reference [32, 64)
    for cell in length["cells"]:
        want = LENGTH_EXCESS[cell["scheme"]] * factor - in_context
        # noise 0.02 per bucket: about 0.017 on a document's excess
        assert np.allclose(cell["docs"]["g"], want, atol=0.06)
        assert cell["docs"]["w"] == [64.0] * 6  # tokens at positions 64..127
        assert cell["excess"] == pytest.approx(np.mean(cell["docs"]["g"]))


def test_same_model_rerun_with_noise_passes_and_lists_the_length_cells(baseline, tmp_path, capsys):
    run = _run(tmp_path / "rerun", draw=2)
    xml_path = tmp_path / "gate.xml"
    code = _check(run, baseline, "--junit-xml", str(xml_path))
    out = capsys.readouterr().out
    assert code == 0, out
    for scheme in LENGTH_SCHEMES:
        assert f"length/{scheme}" in out
    names = [t.get("name") for t in ET.parse(xml_path).getroot().iter("testcase")]
    assert [n for n in names if n.startswith("length/")] == [
        f"length/nll_excess/length/{s}" for s in LENGTH_SCHEMES
    ]


def test_a_planted_drop_in_one_length_scheme_fails_only_that_cell(baseline, tmp_path, capsys):
    run = _run(tmp_path / "drop", draw=2, drop={"lambda:4,64": 0.25})
    xml_path = tmp_path / "gate.xml"
    code = _check(run, baseline, "--junit-xml", str(xml_path))
    out = capsys.readouterr().out
    assert code == 1, out
    failed = [line for line in out.splitlines() if line.endswith("FAIL")]
    assert len(failed) == 1 and "length/lambda:4,64" in failed[0], out
    suite = ET.parse(xml_path).getroot()
    assert suite.get("failures") == "1"
    bad = [t for t in suite.iter("testcase") if t.find("failure") is not None]
    assert bad[0].get("name") == "length/nll_excess/length/lambda:4,64"
    assert "nats/token" in bad[0].find("failure").get("message")


def test_a_drop_within_the_length_margin_passes(baseline, tmp_path):
    run = _run(tmp_path / "drop", draw=2, drop={"lambda:4,64": 0.25})
    assert _check(run, baseline, "--margin-length", "0.5") == 0


@pytest.mark.parametrize(
    "settings,message",
    [
        ({"bucket_width": 8}, "bucket_width: baseline 16, run 8"),
        ({"max_length": 192}, "max_length: baseline 128, run 192"),
        ({"trained_context": 48}, "trained_context: baseline 64, run 48"),
        ({"seed": 7}, "seed: baseline 1234, run 7"),
        ({"positions": "swap:0.05"}, "positions: baseline None, run 'swap:0.05'"),
        ({"schemes": ("none", "scale:2.0")}, "schemes: baseline ['none'"),
        ({"documents": tuple(f"doc-{i}" for i in range(5))}, "documents: baseline ['doc-0'"),
    ],
)
def test_other_length_settings_exit_2_naming_the_setting(
    baseline, tmp_path, capsys, settings, message
):
    run = _run(tmp_path / "other", draw=2, **settings)
    assert _check(run, baseline) == 2
    err = capsys.readouterr().err
    assert "length settings mismatch" in err and message in err, err


def test_length_in_only_one_of_baseline_and_run_exits_2(baseline, tmp_path, capsys):
    plain = _run(tmp_path / "plain", draw=2, with_length=False)
    assert _check(plain, baseline) == 2
    assert "the baseline has length cells" in capsys.readouterr().err
    plain_baseline = tmp_path / "plain.json"
    assert cli(["baseline", str(plain), "-o", str(plain_baseline)]) == 0
    assert json.loads(plain_baseline.read_text())["length"] is None
    with_length = _run(tmp_path / "with", draw=3)
    assert _check(with_length, plain_baseline) == 2
    assert "the run has length cells" in capsys.readouterr().err


@pytest.mark.parametrize("version", [2, 3])
def test_a_baseline_from_before_the_pairing_record_is_refused_saying_how_to_regenerate(
    baseline, tmp_path, capsys, version
):
    def old(data):
        data["baseline_version"] = version
        del data["pairing"]

    path = edited_baseline(baseline, tmp_path, old)
    assert _check(_run(tmp_path / "rerun", draw=2), path) == 2
    err = capsys.readouterr().err
    assert f"baseline_version {version}" in err and "regenerate it with `posgen baseline" in err


@pytest.mark.parametrize(
    "edit,message",
    [
        (lambda d: d.pop("length"), "missing key 'length'"),
        (lambda d: d.__setitem__("length", [1]), "'length' should be an object or null"),
        (lambda d: d["length"]["settings"].pop("seed"), "missing ['seed']"),
        (lambda d: d["length"]["cells"][0].__setitem__("excess", "x"), "'excess' should be"),
        (lambda d: d["length"]["cells"][0]["docs"].__setitem__("g", [0.1]), "same length"),
        (lambda d: d["length"]["cells"].pop(), "are not the settings'"),
    ],
)
def test_a_malformed_length_section_exits_2(baseline, tmp_path, capsys, edit, message):
    path = edited_baseline(baseline, tmp_path, edit)
    assert _check(_run(tmp_path / "run", draw=2), path) == 2
    assert message in capsys.readouterr().err


def test_other_length_documents_in_a_cell_exit_2(baseline, tmp_path, capsys):
    path = edited_baseline(
        baseline, tmp_path, lambda d: d["length"]["cells"][1]["docs"]["keys"].__setitem__(0, "x")
    )
    assert _check(_run(tmp_path / "run", draw=2), path) == 2
    assert "other documents" in capsys.readouterr().err


def test_an_incomplete_length_folder_exits_2(baseline, tmp_path, capsys):
    from posgen.results.scores.length import result_path

    run = _run(tmp_path / "run", draw=2)
    folder = next((run / "length").iterdir())
    result_path(folder, "scale:2.0", "doc-3").unlink()
    assert _check(run, baseline) == 2
    assert "length result scale:2.0 / doc-3 not found" in capsys.readouterr().err


@pytest.mark.parametrize(
    "settings,message",
    [
        ({"documents": ("doc-0",)}, "needs at least 2"),
        ({"max_length": 64}, "needs max length > C"),
    ],
)
def test_a_length_run_the_gate_cannot_pair_is_refused_by_baseline(
    tmp_path, capsys, settings, message
):
    run = _run(tmp_path / "run", draw=1, **settings)
    assert cli(["baseline", str(run), "-o", str(tmp_path / "b.json")]) == 2
    assert message in capsys.readouterr().err
    assert not (tmp_path / "b.json").exists()


@pytest.fixture(scope="module")
def window_baseline(tmp_path_factory):
    root = tmp_path_factory.mktemp("gate_window")
    _run(root / "base", draw=1, window_stride=32)
    path = root / "baseline.json"
    assert cli(["baseline", str(root / "base"), "-o", str(path)]) == 0
    return path


def _failures(run, baseline, tmp_path) -> tuple[int, dict[str, bool]]:
    """Exit status and, per JUnit test case of a length cell, whether it failed."""
    xml_path = tmp_path / "gate.xml"
    code = _check(run, baseline, "--junit-xml", str(xml_path))
    cases = ET.parse(xml_path).getroot().iter("testcase")
    return code, {
        t.get("name"): t.find("failure") is not None
        for t in cases
        if t.get("name").startswith("length")
    }


def test_window_cells_hold_each_documents_excess_over_the_window(window_baseline):
    length = json.loads(window_baseline.read_text())["length"]
    assert length["settings"]["window_stride"] == 32
    fixed = np.random.default_rng(7)
    fixed.normal(3.0, 0.3, 6)
    factor = fixed.uniform(0.5, 1.5, 6)
    assert [c["scheme"] for c in length["window_cells"]] == list(LENGTH_SCHEMES)
    for cell in length["window_cells"]:
        # no in-context offset here: the window covers the same tokens past C
        assert np.allclose(cell["docs"]["g"], LENGTH_EXCESS[cell["scheme"]] * factor, atol=0.04)


def test_harder_text_past_c_fails_the_old_cells_not_the_window_cells(window_baseline, tmp_path):
    run = _run(tmp_path / "hard", draw=2, window_stride=32, hard=0.5)
    code, failed = _failures(run, window_baseline, tmp_path)
    assert code == 1
    for s in LENGTH_SCHEMES:
        assert failed[f"length/nll_excess/length/{s}"]  # the old cells read text as position
        assert not failed[f"length_window/nll_excess/length/{s}"]  # the window cells do not


def test_a_planted_drop_fails_its_window_cell_too(window_baseline, tmp_path):
    run = _run(tmp_path / "drop", draw=2, window_stride=32, drop={"lambda:4,64": 0.25})
    code, failed = _failures(run, window_baseline, tmp_path)
    assert code == 1
    assert [n for n, bad in failed.items() if bad] == [
        "length/nll_excess/length/lambda:4,64",
        "length_window/nll_excess/length/lambda:4,64",
    ]


def test_window_cells_in_one_of_baseline_and_run(baseline, window_baseline, tmp_path, capsys):
    with_window = _run(tmp_path / "with", draw=2, window_stride=32)
    code, failed = _failures(with_window, baseline, tmp_path)
    assert code == 0 and len(failed) == 3  # a baseline from before: its old cells gated
    assert not any(name.startswith("length_window") for name in failed)
    without = _run(tmp_path / "without", draw=2)
    assert _check(without, window_baseline) == 2
    assert "in-distribution window but the run has none" in capsys.readouterr().err
    other = _run(tmp_path / "other", draw=2, window_stride=16)
    assert _check(other, window_baseline) == 2
    assert "window_stride: baseline 32, run 16" in capsys.readouterr().err
