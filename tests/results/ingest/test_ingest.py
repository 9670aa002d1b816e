"""``posgen ingest`` of real lm-eval output (the ``lm_eval`` console script, tiny model)
reproduces what ``posgen run`` computes for the same cells; bad input is refused."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

from synthetic_run import cli

pytestmark = pytest.mark.heavy

BIN = Path(sys.executable).parent
LIMIT = "3"
KEYS = ["task", "metric", "kind", "scheme", "rate", "seed"]


def lm_eval(cwd: Path, out: Path, model: str, model_args: str, tasks: str) -> None:
    env = {k: v for k, v in os.environ.items() if k != "POSGEN_DISABLE_LM_EVAL_HOOK"}
    env.update(HF_HUB_OFFLINE="1", HF_DATASETS_OFFLINE="1", OMP_NUM_THREADS="1")
    cmd = [str(BIN / "lm_eval"), "--model", model, "--model_args", model_args]
    cmd += ["--device", "cpu", "--tasks", tasks, "--limit", LIMIT, "--batch_size", "8"]
    cmd += ["--log_samples", "--output_path", str(out)]
    proc = subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=400)
    assert proc.returncode == 0, proc.stderr[-3000:]


@pytest.fixture(scope="module")
def outputs(tiny_model_dir, tmp_path_factory) -> dict[str, Path]:
    """posgen run of baseline + text + position + feature cells on posgen_prose, and the
    same baseline, text and position cells from plain lm_eval runs."""
    root = tmp_path_factory.mktemp("ingest")
    model = str(tiny_model_dir("llama", 0))
    run = root / "run"
    args = ["run", "--model", model, "--suite", "posgen_prose", "--rates", "0,0.5"]
    args += ["--sigmas", "0,2", "--limit", LIMIT, "--no-progress", "--out", str(run)]
    assert cli(args) == 0
    lm_eval(root, root / "text", "hf", f"pretrained={model},dtype=float32",
            "posgen_prose,perm_swap_50pct_posgen_prose")  # fmt: skip
    lm_eval(root, root / "position", "hf-posgen",
            f"pretrained={model},dtype=float32,positions=swap:0.5,perturb_seed=1234",
            "posgen_prose")  # fmt: skip
    return {"root": root, "run": run, "text": root / "text", "position": root / "position"}


def table(run: Path, name: str) -> pd.DataFrame:
    df = pd.read_parquet(run / name)
    return df.sort_values([k for k in KEYS if k in df.columns]).reset_index(drop=True)


def test_ingest_reproduces_posgen_run(outputs, capsys):
    ingested = outputs["root"] / "ingested"
    code = cli(["ingest", str(outputs["text"]), str(outputs["position"]), "--out", str(ingested)])
    assert code == 0, capsys.readouterr().err
    for name in ("results.parquet", "perdoc.parquet", "scores.json", "report.html", "report.md"):
        assert (ingested / name).is_file()
    ran, got = table(outputs["run"], "degradation.parquet"), table(ingested, "degradation.parquet")
    ran = ran[ran["kind"] != "feature"].reset_index(drop=True)  # not run through lm_eval here
    assert set(got["kind"]) == {"text", "position"} and len(got) == len(ran) > 0
    pd.testing.assert_frame_equal(got, ran, check_exact=False, rtol=1e-6, atol=1e-9)
    a, b = table(outputs["run"], "perdoc.parquet"), table(ingested, "perdoc.parquet")
    a = a[a["kind"] != "feature"].sort_values([*KEYS, "doc_key"]).reset_index(drop=True)
    b = b.sort_values([*KEYS, "doc_key"]).reset_index(drop=True)
    # lm-eval's output holds no model-side plan: an ingested position cell's realised
    # amount is not recorded (NaN), while a text cell's is recomputed from the logged docs
    realised = [c for c in a.columns if c.startswith("realised_")]
    model_side = (a["kind"] == "position").to_numpy()
    assert model_side.any() and (~model_side).any()
    assert b.loc[model_side, realised].isna().all().all()
    assert a.loc[model_side, "realised_n"].notna().all()
    a.loc[model_side, realised] = float("nan")
    pd.testing.assert_frame_equal(b, a, check_exact=False, rtol=1e-6, atol=1e-9)
    cfg = json.loads((ingested / "config.json").read_text())["config"]
    assert cfg["sweep"] == {
        "text": {"schemes": ["swap"], "values": [0.0, 0.5]},
        "position": {"schemes": ["swap"], "values": [0.0, 0.5]},
    }
    assert "Suite: ingested" in (ingested / "report.md").read_text()
    # the same thresholds and bootstrap as posgen run's: both from Scoring's defaults
    run_cfg = json.loads((outputs["run"] / "config.json").read_text())["config"]
    assert cfg["scoring"] == run_cfg["scoring"]


def copy(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


def edit_results(folder: Path, fn) -> None:
    (path,) = folder.rglob("results_*.json")
    data = json.loads(path.read_text())
    fn(data)
    path.write_text(json.dumps(data))


def refused(capsys, *argv: str) -> str:
    assert cli(["ingest", *argv]) == 2
    return capsys.readouterr().err


def baseline_only(text: Path, where: Path) -> Path:
    """The baseline of ``text`` (an lm-eval output of posgen_prose and its swapped task)
    without the text cell."""
    out = copy(text, where)
    name = "perm_swap_50pct_posgen_prose"

    def drop(data: dict) -> None:
        for key in ("results", "configs", "versions", "n-shot", "higher_is_better", "n-samples"):
            (data.get(key) or {}).pop(name, None)

    edit_results(out, drop)
    for samples in out.rglob(f"samples_{name}_*.jsonl"):
        samples.unlink()
    return out


@pytest.mark.filterwarnings("error::UserWarning")
def test_model_side_cells_alone_are_reported_without_a_warning(outputs, tmp_path, capsys):
    """lm-eval's output records no realised amount of a position cell, so the common
    realised axis places no curve: the report says why instead of drawing an empty panel
    (whose empty legend matplotlib answered with a UserWarning on every such ingest)."""
    base = baseline_only(outputs["text"], tmp_path / "base")
    out = tmp_path / "ingested"
    code = cli(["ingest", str(base), str(outputs["position"]), "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    report = (out / "report.md").read_text()
    assert "no common-axis figure: no realised amount recorded" in report


def test_a_perturbed_cell_without_its_baseline_is_refused(outputs, tmp_path, capsys):
    err = refused(capsys, str(outputs["position"]), "--out", str(tmp_path / "r"))
    assert "no baseline for" in err and "posgen_prose" in err
    assert not (tmp_path / "r").exists()


def test_mixed_seeds_are_refused(outputs, tmp_path, capsys):
    other = copy(outputs["position"], tmp_path / "pos")
    edit_results(other, lambda d: d["config"]["posgen"].update(perturb_seed=7))
    err = refused(capsys, str(outputs["text"]), str(other), "--out", str(tmp_path / "r"))
    assert "mixed perturbation seeds [7, 1234]" in err


def test_documents_that_differ_from_the_baseline_are_refused(outputs, tmp_path, capsys):
    other = copy(outputs["position"], tmp_path / "pos")
    (samples,) = other.rglob("samples_*.jsonl")
    rows = [json.loads(line) for line in samples.read_text().splitlines()]
    rows[0]["doc"]["doc_id"] = "another-document"
    samples.write_text("".join(json.dumps(r) + "\n" for r in rows))
    err = refused(capsys, str(outputs["text"]), str(other), "--out", str(tmp_path / "r"))
    assert "documents differ from the baseline" in err


def test_a_cell_given_twice_and_missing_samples_are_refused(outputs, tmp_path, capsys):
    twice = copy(outputs["position"], tmp_path / "again")
    err = refused(
        capsys, str(outputs["text"]), str(outputs["position"]), str(twice), "--out",
        str(tmp_path / "r"),
    )  # fmt: skip
    assert "is in two results files" in err
    for samples in twice.rglob("samples_*.jsonl"):
        samples.unlink()
    err = refused(capsys, str(outputs["text"]), str(twice), "--out", str(tmp_path / "r"))
    assert "--log_samples" in err
    err = refused(capsys, str(tmp_path / "nowhere"), "--out", str(tmp_path / "r"))
    assert "no such lm-eval output folder" in err


def test_the_prompt_settings_of_the_outputs_are_recorded_and_must_agree(outputs, tmp_path, capsys):
    """lm-eval's results record its generation arguments, system prompt and chat
    template: the ingested run's config keeps them, and outputs made with different ones
    are refused (their cells would not compare)."""
    text, position = (
        copy(outputs["text"], tmp_path / "t"),
        copy(outputs["position"], tmp_path / "p"),
    )

    def prompted(data: dict) -> None:
        data["config"]["gen_kwargs"] = {"temperature": 0.0, "max_gen_toks": 16}
        data.update(system_instruction="Answer briefly.", chat_template="{{ x }}")
        data["fewshot_as_multiturn"] = True

    for folder in (text, position):
        edit_results(folder, prompted)
    out = tmp_path / "ingested"
    assert cli(["ingest", str(text), str(position), "--out", str(out)]) == 0
    config = json.loads((out / "config.json").read_text())["config"]
    assert config["gen_kwargs"] == {"temperature": 0.0, "max_gen_toks": 16}
    assert config["system_instruction"] == "Answer briefly."
    assert config["apply_chat_template"] is True and config["fewshot_as_multiturn"] is True
    plain_out = tmp_path / "plain"
    assert (
        cli(["ingest", str(outputs["text"]), str(outputs["position"]), "--out", str(plain_out)])
        == 0
    )
    plain = json.loads((plain_out / "config.json").read_text())["config"]
    assert not {"gen_kwargs", "system_instruction", "apply_chat_template"} & set(plain)
    edit_results(position, lambda d: d["config"].update(gen_kwargs={"temperature": 1.0}))
    err = refused(capsys, str(text), str(position), "--out", str(tmp_path / "r"))
    assert "made with different gen_kwargs" in err and not (tmp_path / "r").exists()


@pytest.fixture(scope="module")
def settings(outputs, tiny_model_dir) -> dict[str, Path]:
    """hf-posgen outputs with settings a run folder cannot hold: logits=additive, and
    positions= in one layer only."""
    model, root = str(tiny_model_dir("llama", 0)), outputs["root"]
    runs = {
        "logits": "logits=additive",
        "layers": "positions=swap:0.05,layers=1,perturb_seed=1234",
    }
    for name, args in runs.items():
        lm_eval(root, root / name, "hf-posgen", f"pretrained={model},dtype=float32,{args}",
                "posgen_prose")  # fmt: skip
    return {name: root / name for name in runs}


def test_a_logits_output_is_refused_not_taken_for_the_baseline(outputs, settings, tmp_path, capsys):
    """Beside a position cell, a logits=additive output was the position cell's baseline
    (its 'degradation' −95 %); it is refused in one line, nothing written."""
    out = tmp_path / "r"
    err = refused(capsys, str(outputs["position"]), str(settings["logits"]), "--out", str(out))
    (results,) = settings["logits"].rglob("results_*.json")
    assert err.strip() == (
        f"posgen ingest: {results} / posgen_prose: hf-posgen ran with logits=additive, which "
        "a run folder cannot represent (its cells are the plain model or positions=/features= "
        "in every layer); measure that with posgen cause, and ingest only outputs without "
        "layers=, heads=, logits= or length="
    )
    assert not out.exists()


def test_a_scheme_in_one_layer_is_refused_not_taken_for_every_layer(
    outputs, settings, tmp_path, capsys
):
    out = tmp_path / "r"
    err = refused(capsys, str(outputs["text"]), str(settings["layers"]), "--out", str(out))
    assert len(err.strip().splitlines()) == 1 and not out.exists()
    assert "hf-posgen ran with layers=1, which a run folder cannot represent" in err
    assert "measure that with posgen layers, and ingest only outputs without" in err


def test_settings_are_read_from_the_model_args_too(outputs, settings, tmp_path, capsys):
    """A record without them (an older posgen) is read with lm-eval's model_args; and
    length=none, the plain model, is no setting."""
    logits = copy(settings["logits"], tmp_path / "logits")
    edit_results(logits, lambda d: d["config"]["posgen"].pop("logits"))
    err = refused(capsys, str(outputs["position"]), str(logits), "--out", str(tmp_path / "r"))
    assert "hf-posgen ran with logits=additive" in err
    for name, value in (("heads", "0;1"), ("length", "lambda:4:64")):
        other = copy(outputs["position"], tmp_path / name)
        edit_results(other, lambda d, kv={name: value}: d["config"]["model_args"].update(kv))
        err = refused(capsys, str(outputs["text"]), str(other), "--out", str(tmp_path / "r"))
        assert f"hf-posgen ran with {name}={value}" in err
    plain = copy(outputs["position"], tmp_path / "plain-length")
    edit_results(plain, lambda d: d["config"]["model_args"].update(length="none"))
    out = tmp_path / "ingested"
    assert cli(["ingest", str(outputs["text"]), str(plain), "--out", str(out)]) == 0


def test_hf_posgen_records_the_model_folder_and_its_content(outputs, tiny_model_dir):
    """What ingest compares across a model's cells: the folder the name resolved to, and
    its content revision (another checkpoint in place is another model)."""
    from posgen.harness.loading.identity import content_revision

    (results,) = outputs["position"].rglob("results_*.json")
    model = tiny_model_dir("llama", 0).resolve()
    assert json.loads(results.read_text())["config"]["posgen_model"] == {
        "path": str(model),
        "revision": content_revision(model),
    }


@pytest.fixture(scope="module")
def short_window(outputs, tiny_model_dir) -> Path:
    """An hf-posgen position cell run with max_length=64 (the model's own window: 2048)."""
    model, out = str(tiny_model_dir("llama", 0)), outputs["root"] / "short"
    lm_eval(outputs["root"], out, "hf-posgen",
            f"pretrained={model},dtype=float32,positions=swap:0.5,perturb_seed=1234,max_length=64",
            "posgen_prose")  # fmt: skip
    return out


def test_a_cell_run_in_another_window_is_refused_naming_max_length(
    outputs, short_window, tmp_path, capsys
):
    """Beside a baseline scored in the model's own window, its degradation would be the
    shorter window's (+187 % perplexity at swap 0.01 on a real model), not the swap's."""
    out = tmp_path / "r"
    err = refused(capsys, str(outputs["text"]), str(short_window), "--out", str(out))
    assert len(err.strip().splitlines()) == 1 and not out.exists()
    assert "the cells were run with different max_length: " in err
    assert "64 in " in err and "2048 in " in err and "the window each document" in err
    for folder in (outputs["text"], short_window):
        (results,) = folder.rglob("results_*.json")
        assert str(results) in err


def test_an_interrupted_ingest_resumes_and_other_settings_are_refused(
    outputs, tmp_path, capsys, monkeypatch
):
    """Killed after its first cell, the rerun into the same folder finishes it (the same
    settings); other settings (a threshold) are refused and the folder stays as it was."""
    from posgen.results.folder.run_store import RunStore

    out = tmp_path / "ingested"
    argv = ["ingest", str(outputs["text"]), str(outputs["position"]), "--out", str(out)]
    write = RunStore.write_cell

    def killed_after_one(self, *a, **kw):
        if any((self.root / "cells").rglob("*.json")):
            raise KeyboardInterrupt
        return write(self, *a, **kw)

    monkeypatch.setattr(RunStore, "write_cell", killed_after_one)
    with pytest.raises(KeyboardInterrupt):
        cli(argv)
    assert len(list((out / "cells").rglob("*.json"))) == 1
    monkeypatch.setattr(RunStore, "write_cell", write)
    assert cli(argv) == 0, capsys.readouterr().err
    cells = sorted((out / "cells").rglob("*.json"))
    assert len(cells) == 3 and (out / "report.md").is_file()
    config = (out / "config.json").read_bytes()
    capsys.readouterr()
    assert cli([*argv, "--threshold", "0.2"]) == 2
    err = capsys.readouterr().err
    assert "different config" in err and "threshold_ppl: 0.1 -> 0.2" in err
    assert (out / "config.json").read_bytes() == config
