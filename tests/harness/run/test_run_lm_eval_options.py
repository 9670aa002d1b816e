"""``posgen run`` as an lm-eval user runs lm-eval: few-shot, chat templates, device maps,
lm-eval's own output layout and log (integration tier, tiny models)."""

from __future__ import annotations

import json
import logging
import shutil
from pathlib import Path

import pandas as pd
import pytest

from synthetic_run import cli
from tiny_models import CHAT_TEMPLATE

pytestmark = pytest.mark.heavy

TEXT_ONLY = ["--kinds", "text", "--rates", "0,0.5", "--no-progress"]


def run(model: Path | str, out: Path, *extra: str) -> int:
    return cli(["run", "--model", str(model), *TEXT_ONLY, "--out", str(out), *extra])


def raw_files(run_dir: Path, cell: str) -> list[str]:
    return sorted(str(p) for p in run_dir.glob(f"raw/*/{cell}/**/*") if p.is_file())


def lm_eval_output(run_dir: Path, cell: str) -> tuple[dict, list[dict]]:
    """A cell's results and samples, found as lm-eval's own tooling finds them."""
    from lm_eval.utils import get_latest_filename, get_results_filenames
    from lm_eval.utils import get_sample_results_filenames as samples_of

    files = raw_files(run_dir, cell)
    results = json.loads(Path(get_latest_filename(get_results_filenames(files))).read_text())
    (samples_file,) = samples_of(files)
    lines = Path(samples_file).read_text().splitlines()
    return results, [json.loads(line) for line in lines]


@pytest.fixture(scope="module")
def prose_run(tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("lm_eval_out") / "run"
    assert run(tiny_model_dir("llama", 0), out, "--suite", "posgen_prose", "--limit", "3") == 0
    return out


def test_each_cell_is_saved_in_lm_evals_own_layout(prose_run):
    import lm_eval.utils

    for cell, task in [
        ("posgen_prose__none", "posgen_prose"),
        ("posgen_prose__text_swap_0.5", "perm_swap_50pct_posgen_prose"),
    ]:
        files = raw_files(prose_run, cell)
        assert len(files) == 2  # one model folder: results_<date>.json, samples_<task>_<date>.jsonl
        (model_dir,) = {Path(f).parent for f in files}
        assert model_dir.name == lm_eval.utils.sanitize_model_name(
            json.loads((prose_run / "config.json").read_text())["config"]["models"][0]["path"]
        )
        results, samples = lm_eval_output(prose_run, cell)
        date = Path(lm_eval_output_file(files, "results_")).stem.removeprefix("results_")
        samples_file = Path(lm_eval_output_file(files, "samples_")).name
        assert samples_file == f"samples_{task}_{date}.jsonl"
        assert lm_eval.utils.get_file_datetime(samples_file) == date
        assert set(results["results"]) == {task} and results["n-samples"][task]["effective"] == 3
        assert sorted(s["doc_id"] for s in samples) == [0, 1, 2]
        assert results["task_hashes"][task]  # the tracker's hash of the logged samples


def lm_eval_output_file(files: list[str], prefix: str) -> str:
    (found,) = [f for f in files if Path(f).name.startswith(prefix)]
    return found


def test_posgen_ingest_of_the_raw_folder_gives_the_runs_values(prose_run, tmp_path):
    assert cli(["ingest", str(prose_run / "raw"), "--out", str(tmp_path / "ing")]) == 0
    cols = ["kind", "metric", "value"]
    ran = pd.read_parquet(prose_run / "results.parquet")[cols].sort_values(cols[:2])
    ingested = pd.read_parquet(tmp_path / "ing" / "results.parquet")[cols].sort_values(cols[:2])
    pd.testing.assert_frame_equal(ran.reset_index(drop=True), ingested.reset_index(drop=True))


def test_lm_evals_log_reaches_the_run_log_for_every_cell(prose_run):
    (log,) = prose_run.glob("raw/*/lm_eval.log")
    text = log.read_text()
    assert "Building contexts for posgen_prose on rank 0" in text
    assert "Building contexts for perm_swap_50pct_posgen_prose on rank 0" in text


def test_a_model_session_leaves_lm_evals_logger_as_it_found_it(
    tiny_model_dir, tmp_path, monkeypatch
):
    from posgen.harness.run import cells

    logger = logging.getLogger("lm_eval")
    before = (logger.level, list(logger.handlers), logger.propagate)
    seen = []
    original = cells.ModelSession.evaluate

    def spy(self, cell):
        seen.append((logger.level, list(logger.handlers)))
        return original(self, cell)

    monkeypatch.setattr(cells.ModelSession, "evaluate", spy)
    assert (
        run(tiny_model_dir("llama", 0), tmp_path / "r", "--suite", "posgen_prose", "--limit", "1")
        == 0
    )
    assert len(seen) == 2 and all(level == logging.INFO for level, _ in seen)
    assert (logger.level, list(logger.handlers), logger.propagate) == before


def test_an_interrupted_cells_raw_folder_is_replaced_on_resume(prose_run, tiny_model_dir, tmp_path):
    out = tmp_path / "copy"
    shutil.copytree(prose_run, out)
    victim = next((out / "cells").rglob("*text_swap*.json"))
    victim.unlink()  # the cell did not finish: its raw folder may be a leftover
    (raw,) = out.glob(f"raw/*/{victim.stem}")
    stale = next(raw.rglob("results_*.json"))
    assert run(tiny_model_dir("llama", 0), out, "--suite", "posgen_prose", "--limit", "3") == 0
    assert victim.is_file() and not stale.exists()
    assert len(raw_files(out, victim.stem)) == 2


# ---------------------------------------------------------------- few-shot
@pytest.fixture(scope="module")
def fewshot_run(tiny_model_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("fewshot") / "run"
    model = tiny_model_dir("llama", 0)
    assert run(model, out, "--suite", "posgen_cloze", "--limit", "3", "--num-fewshot", "2") == 0
    return out


def _contexts(run_dir: Path, cell: str) -> dict[int, tuple[str, str]]:
    """doc_id -> (the request context, the document's own context field)."""
    _, samples = lm_eval_output(run_dir, cell)
    return {
        s["doc_id"]: (s["arguments"]["gen_args_0"]["arg_0"], s["doc"]["context"]) for s in samples
    }


def test_num_fewshot_reaches_lm_eval_and_text_cells_perturb_only_the_target(fewshot_run):
    results, _ = lm_eval_output(fewshot_run, "posgen_cloze__text_swap_0.5")
    assert results["n-shot"] == {"perm_swap_50pct_posgen_cloze": 2}
    assert json.loads((fewshot_run / "config.json").read_text())["config"]["num_fewshot"] == 2
    base = _contexts(fewshot_run, "posgen_cloze__none")
    text = _contexts(fewshot_run, "posgen_cloze__text_swap_0.5")
    assert base.keys() == text.keys() == {0, 1, 2}
    changed = 0
    for doc_id, (ctx, own) in text.items():
        base_ctx, base_own = base[doc_id]
        assert ctx.endswith(own) and base_ctx.endswith(base_own)
        shots = ctx[: -len(own)]
        assert shots and shots == base_ctx[: -len(base_own)]  # the examples, unperturbed
        changed += own != base_own
    assert changed  # and the target documents perturbed


def test_another_num_fewshot_into_the_same_folder_is_refused(fewshot_run, tiny_model_dir, capsys):
    model = tiny_model_dir("llama", 0)
    args = ["--suite", "posgen_cloze", "--limit", "3", "--num-fewshot", "1"]
    assert run(model, fewshot_run, *args) == 2
    assert "num_fewshot: 2 -> 1" in capsys.readouterr().err


# ---------------------------------------------------------------- chat template
def test_a_chat_template_renders_perturbed_content_with_its_tokens_intact(chat_model, tmp_path):
    from transformers import AutoTokenizer

    out = tmp_path / "run"
    args = ["--suite", "posgen_cloze", "--limit", "3", "--apply-chat-template"]
    assert run(chat_model, out, *args) == 0
    tok = AutoTokenizer.from_pretrained(chat_model)
    results, _ = lm_eval_output(out, "posgen_cloze__text_swap_0.5")
    assert results["chat_template"] == CHAT_TEMPLATE and results["fewshot_as_multiturn"] is True
    base = _contexts(out, "posgen_cloze__none")
    text = _contexts(out, "posgen_cloze__text_swap_0.5")
    for contexts in (base, text):
        for ctx, own in contexts.values():
            rendered = tok.apply_chat_template(
                [{"role": "user", "content": own}], tokenize=False, add_generation_prompt=True
            )
            assert ctx == rendered  # the template's tokens around the (perturbed) content
    assert any(text[d][1] != base[d][1] for d in text)
    config = json.loads((out / "config.json").read_text())["config"]
    assert config["apply_chat_template"] is True


def test_a_position_cell_under_a_chat_template_moves_the_content_only(chat_model, tmp_path):
    from transformers import AutoTokenizer

    out = tmp_path / "run"
    args = ["run", "--model", str(chat_model), "--kinds", "position", "--rates", "0,0.5"]
    args += ["--suite", "posgen_cloze", "--limit", "3", "--apply-chat-template", "--no-progress"]
    assert cli([*args, "--out", str(out)]) == 0
    tok = AutoTokenizer.from_pretrained(chat_model)
    _, samples = lm_eval_output(out, "posgen_cloze__none")
    contexts = {
        s["doc"]["doc_id"]: (s["arguments"]["gen_args_0"]["arg_0"], s["doc"]["context"])
        for s in samples
    }
    perdoc = pd.read_parquet(out / "perdoc.parquet")
    cell = perdoc[(perdoc["kind"] == "position") & (perdoc["rate"] == 0.5)]
    cell = cell[cell["metric"] == "acc"]
    assert len(cell) == 3
    for doc, n in zip(cell["doc_key"], cell["realised_n"], strict=True):
        ctx, own = contexts[doc]
        whole = len(tok(ctx.rstrip(), add_special_tokens=False)["input_ids"])
        content = len(tok(own, add_special_tokens=False)["input_ids"])
        assert (
            0 < n < whole and abs(n - content) <= 2
        )  # the document's tokens, give or take a merge
    assert (cell["realised_fraction_moved"] > 0).all()


# ---------------------------------------------------------------- device map
@pytest.mark.parametrize("device_map", ["cpu", "auto", '{"": "cpu"}'])
def test_a_device_map_reaches_from_pretrained_and_places_the_model(
    tiny_model_dir, tmp_path, monkeypatch, device_map
):
    from transformers import AutoModelForCausalLM

    from posgen.harness.run import cells

    calls = []
    original = AutoModelForCausalLM.from_pretrained.__func__

    def spy(cls, *args, **kwargs):
        calls.append(kwargs)
        return original(cls, *args, **kwargs)

    monkeypatch.setattr(AutoModelForCausalLM, "from_pretrained", classmethod(spy))
    devices = []
    evaluate = cells.ModelSession.evaluate

    def where(self, cell):
        devices.append({p.device.type for p in self.lm.model.parameters()})
        return evaluate(self, cell)

    monkeypatch.setattr(cells.ModelSession, "evaluate", where)
    out = tmp_path / "run"
    args = ["--suite", "posgen_prose", "--limit", "1", "--device-map", device_map]
    assert run(tiny_model_dir("llama", 0), out, *args) == 0
    expected = json.loads(device_map) if device_map.startswith("{") else device_map
    assert [c["device_map"] for c in calls] == [expected]
    assert devices and all(d == {"cpu"} for d in devices)  # nothing offloaded to disk (meta)
    assert not list(out.glob(".offload-*"))
    model = json.loads((out / "config.json").read_text())["config"]["models"][0]
    assert model["device_map"] == (
        json.dumps(expected, sort_keys=True) if device_map.startswith("{") else device_map
    )
