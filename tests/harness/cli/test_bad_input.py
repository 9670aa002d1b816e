"""Bad input to the commands that load a model (length, decompose, run): one line on
stderr, exit status 2, nothing written and no model touched (not even the embedded
model's conversion)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from posgen.harness.cli import main as cli_main
from tiny_models import build_short_context_model, build_tokenizer

NO_CUDA = pytest.mark.skipif(torch.cuda.is_available(), reason="this machine has CUDA")


@pytest.fixture(scope="module")
def models(tmp_path_factory, tiny_model_dir) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bad-input")
    short = root / "short"
    build_short_context_model("llama", max_positions=64).save_pretrained(short)
    build_tokenizer().save_pretrained(short)
    (root / "no-config").mkdir()
    (root / "afile").write_text("not a folder")
    return {
        "short": short,
        "gpt2": tiny_model_dir("gpt2", 0),
        "mpt": tiny_model_dir("mpt", 0),
        "no-config": root / "no-config",
        "afile": root / "afile",
    }


@pytest.fixture
def no_loading(monkeypatch, tmp_path):
    """Any model, tokenizer or config load (or the embedded conversion) fails the test;
    the working folder is empty, so a default output folder would show."""
    from posgen.harness import embedded, loading
    from posgen.harness.run import cells

    def refuse(*a, **k):
        raise AssertionError("a model, tokenizer or config was loaded")

    for name in ("load_model", "load_tokenizer", "load_config"):
        monkeypatch.setattr(loading, name, refuse)
    monkeypatch.setattr(embedded, "resolve_pretrained", refuse)
    monkeypatch.setattr(cells.ModelSession, "__enter__", refuse)
    monkeypatch.chdir(tmp_path)
    return tmp_path


def _refused(argv: list[str], message: str, capsys, cwd: Path) -> None:
    before = sorted(p.name for p in cwd.iterdir())
    assert cli_main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    assert message in err, err
    assert sorted(p.name for p in cwd.iterdir()) == before  # nothing written


LENGTH = [
    (["--chunk", "0"], "--chunk must be an integer >= 1, got 0"),
    (["--chunk", "-5"], "--chunk must be an integer >= 1, got -5"),
    (["--documents", "0"], "--documents must be an integer >= 1, got 0"),
    (["--max-length", "0"], "--max-length must be an integer >= 2, got 0"),
    (["--seed", "-1"], "--seed must be an integer in [0, 2**32), got -1"),
    (["--bucket-width", "0"], "--bucket-width must be an integer >= 1"),
    (["--block-size", "0"], "--block-size must be an integer >= 1"),
    (["--trained-context", "1"], "--trained-context must be an integer >= 2"),
    (["--window-stride", "0"], "--window-stride must be an integer >= 1, got 0"),
    (["--threshold", "nan"], "--threshold must be a finite number > 0"),
    (["--device", "bogus"], "--device 'bogus': give cpu, cuda, cuda:N or mps"),
    (["--dtype", "float8"], "--dtype: 'float8'"),
    (["--peft", "/no/such/adapter"], "no such adapter folder"),
    (["--schemes", "lambda:4,C,7"], "length scheme 'lambda:4,C,7': write lambda:GLOBAL,WINDOW"),
]


@pytest.mark.parametrize(("args", "message"), LENGTH)
def test_length_refuses_bad_numbers_and_flags(models, no_loading, capsys, args, message):
    argv = ["length", "--model", str(models["short"]), "--out", str(no_loading / "out"), *args]
    _refused(argv, message, capsys, no_loading)


WINDOW = [
    (["--window-stride", "33"], "must be an integer in [1, C/2] = [1, 32], got 33"),
    (
        ["--max-length", "50"],
        "--max-length 50: a max length of 50 tokens does not pass the trained context C = 64, "
        "and posgen length measures past C; give --max-length > 64 (or --factor > 1; the "
        "default F = 2 runs to 128), or --trained-context below 50",
    ),
    (["--window-stride", "8", "--max-length", "64"], "--max-length 64: a max length of 64"),
    (["--factor", "0.5"], "--factor 0.5: a max length of 32 tokens does not pass"),
    (["--factor", "1"], "--factor 1: a max length of 64 tokens does not pass"),
]


@pytest.mark.parametrize(("args", "message"), WINDOW)
def test_length_refuses_a_window_stride_the_trained_context_rules_out(
    models, monkeypatch, tmp_path, capsys, args, message
):
    """Checked against C from the model's config, before any weight or tokenizer loads: a
    window stride past C/2, and a max length that does not pass C (which ran, measured
    nothing past C and reported an effective length ≥ the max length)."""
    from posgen.harness import loading

    def refuse(*a, **k):
        raise AssertionError("weights or a tokenizer were loaded")

    monkeypatch.setattr(loading, "load_model", refuse)
    monkeypatch.setattr(loading, "load_tokenizer", refuse)
    monkeypatch.chdir(tmp_path)
    argv = ["length", "--model", str(models["short"]), "--out", str(tmp_path / "out"), *args]
    _refused(argv, message, capsys, tmp_path)


def test_length_refuses_a_bad_factor_before_the_embedded_model_converts(no_loading, capsys):
    _refused(
        ["length", "--factor", "-1"], "--factor must be a finite number > 0", capsys, no_loading
    )


MODELS = [
    ("missing", "no such model folder"),
    ("no-config", "has no config.json"),
    ("gpt2", "has no rotary position embedding"),
]


# every position family decomposes (GPT-2, MPT and Falcon-ALiBi too): no gpt2 case there
BAD_MODELS = [
    (command, model, message)
    for command in ("length", "decompose")
    for model, message in MODELS
    if (command, model) != ("decompose", "gpt2")
]


@pytest.mark.parametrize(("command", "model", "message"), BAD_MODELS)
def test_a_bad_model_is_refused(models, no_loading, capsys, command, model, message):
    if (command, model) == ("length", "gpt2"):
        message = "has learned absolute positions: its table has a row per position"
    path = models.get(model, no_loading / "no-such-model")
    argv = [command, "--model", str(path), "--out", str(no_loading / "out")]
    _refused(argv, message, capsys, no_loading)


def test_length_on_alibi_takes_only_the_scheme_none(models, tiny_model_dir, no_loading, capsys):
    bloom = str(tiny_model_dir("bloom", 0))
    capsys.readouterr()  # building the model (on first use) prints its own progress
    argv = ["length", "--model", bloom, "--out", str(no_loading / "o"), "--schemes", "scale:2"]
    _refused([*argv, "--trained-context", "32"], "only the scheme none applies", capsys, no_loading)


@pytest.mark.parametrize("flag", [["--length", "scale:2"], ["--experiments"]])
def test_decompose_refuses_rope_measures_on_learned_positions(models, no_loading, capsys, flag):
    argv = ["decompose", "--model", str(models["gpt2"]), "--out", str(no_loading / "o"), *flag]
    _refused(argv, f"{flag[0]} measures RoPE models", capsys, no_loading)


def _out_cases(models, cwd: Path) -> list[tuple[str, str]]:
    return [
        (str(models["afile"]), "is a file, not a folder; choose another --out"),
        (
            str(models["afile"] / "sub"),
            "is a file, so no folder can be made under it; choose another --out",
        ),
        ("/sys/posgen-out", "cannot write into /sys"),
    ]


@pytest.mark.parametrize("command", ["length", "decompose", "run", "layers", "cause", "ingest"])
@pytest.mark.parametrize("case", [0, 1, 2])
def test_an_unusable_out_is_refused(models, no_loading, capsys, monkeypatch, command, case):
    """Every command that takes --out refuses a file, a path under a file and a folder it
    cannot write, in one line, before it reads the model's entry (its config)."""
    from posgen.harness import loading
    from posgen.harness.run import resolve

    def refuse(*a, **k):
        raise AssertionError("the model entry was read before --out was checked")

    monkeypatch.setattr(loading, "model_entries", refuse)
    monkeypatch.setattr(resolve, "model_entries", refuse)
    out, message = _out_cases(models, no_loading)[case]
    source = (
        [str(no_loading / "lm-eval-out")]
        if command == "ingest"
        else ["--model", str(models["short"])]
    )
    _refused([command, *source, "--out", out], message, capsys, no_loading)
    assert models["afile"].read_text() == "not a folder"


@pytest.mark.parametrize("command", ["length", "decompose", "run"])
def test_a_bogus_device_is_refused(models, no_loading, capsys, command):
    argv = [command, "--model", str(models["short"]), "--device", "bogus"]
    _refused(argv, "--device 'bogus': give cpu, cuda, cuda:N or mps", capsys, no_loading)


@NO_CUDA
@pytest.mark.parametrize("command", ["length", "decompose", "run"])
def test_cuda_without_cuda_is_refused(models, no_loading, capsys, command):
    argv = [command, "--model", str(models["short"]), "--device", "cuda"]
    _refused(argv, "--device cuda: no CUDA device is available", capsys, no_loading)


def test_decompose_refuses_a_negative_seed(models, no_loading, capsys):
    argv = ["decompose", "--model", str(models["short"]), "--seed", "-1"]
    _refused(argv, "--seed must be an integer in [0, 2**32)", capsys, no_loading)


def test_a_one_document_length_run_writes_strict_json(models, tmp_path):
    out = tmp_path / "one"
    argv = ["length", "--model", str(models["short"]), "--documents", "1", "--schemes", "none"]
    assert cli_main([*argv, "--bucket-width", "16", "--out", str(out), "--device", "cpu"]) == 0

    def refuse(name: str):
        raise AssertionError(f"{name} in length_scores.json")

    scores = json.loads((out / "length_scores.json").read_text(), parse_constant=refuse)
    assert scores["curves"][0]["ci_low"] is None  # one document: no interval, null
    for path in [out / "config.json", *(out / "docs").rglob("*.json")]:
        json.loads(path.read_text(), parse_constant=refuse)


@pytest.fixture
def no_weights(monkeypatch, tmp_path):
    """As ``no_loading``, but a model's config (config.json, no weights) may be read:
    what a command checks against the model before anything heavier."""
    from posgen.harness import embedded, loading
    from posgen.harness.run import cells

    def refuse(*a, **k):
        raise AssertionError("a model or tokenizer was loaded")

    for name in ("load_model", "load_tokenizer"):
        monkeypatch.setattr(loading, name, refuse)
    monkeypatch.setattr(embedded, "embedded_model_path", refuse)
    monkeypatch.setattr(cells.ModelSession, "__enter__", refuse)
    monkeypatch.chdir(tmp_path)
    return tmp_path


@pytest.fixture(scope="module")
def capped(tmp_path_factory) -> dict[str, Path]:
    """Config-only model folders: Gemma-2 as configured (final logit soft-capping), and
    one with attention soft-capping only (its logits are lm_head(hidden))."""
    from transformers import AutoConfig

    from tiny_models import CONFIGS

    root = tmp_path_factory.mktemp("capped")
    final = AutoConfig.for_model("gemma2", **CONFIGS["gemma2"])
    final.save_pretrained(root / "final")
    attention = AutoConfig.for_model(
        "gemma2", **{**CONFIGS["gemma2"], "final_logit_softcapping": None}
    )
    attention.save_pretrained(root / "attention")
    return {"final": root / "final", "attention": root / "attention"}


def test_length_refuses_a_scheme_listed_twice(models, no_loading, capsys):
    argv = ["length", "--model", str(models["short"]), "--schemes", "none;none"]
    _refused(argv, "length scheme none is listed twice", capsys, no_loading)


def test_length_refuses_a_revision_of_a_local_folder(models, no_loading, capsys):
    argv = ["length", "--model", str(models["short"]), "--revision", "main"]
    message = f"--revision main: {models['short']} is a local folder, which has no revisions"
    _refused(argv, message, capsys, no_loading)


@pytest.mark.parametrize(("value", "found"), [("3", "is a number (3)"), ("null", "is null")])
def test_length_says_what_a_jsonl_text_field_holds(models, no_loading, capsys, value, found):
    data = no_loading.parent / f"rows-{value}.jsonl"
    data.write_text('{"text": "a long text"}\n{"text": ' + value + "}\n")
    argv = ["length", "--model", str(models["short"]), "--data", str(data)]
    _refused(argv, f"line 2: field 'text' {found}, not text", capsys, no_loading)


def test_length_refuses_final_soft_capping_from_the_config(capped, no_weights, capsys):
    argv = ["length", "--model", str(capped["final"]), "--schemes", "none"]
    _refused(argv, "final_logit_softcapping=30.0", capsys, no_weights)


def test_length_refuses_lambda_on_attention_soft_capping(capped, no_weights, capsys):
    argv = ["length", "--model", str(capped["attention"]), "--schemes", "lambda:4,C"]
    _refused(
        [*argv, "--decompose"],
        "length scheme lambda:4,2048: lambda attention does not support logit soft-capping",
        capsys,
        no_weights,
    )


DECOMPOSE = [
    (["--trained-context", "1", "--tokens", "64"], "--trained-context must be an integer >= 2"),
    (["--tokens", "100000000"], "the probe text"),
    (["--length", "none;scale:2"], "--length 'none;scale:2': one scheme only (got 2)"),
    (["--length", "scale"], "--length: length scheme 'scale' needs a value"),
    (["--length", "lambda:4,C,7"], "--length: length scheme 'lambda:4,C,7': write"),
]


@pytest.mark.parametrize(("args", "message"), DECOMPOSE)
def test_decompose_refuses_bad_numbers_and_schemes(models, no_loading, capsys, args, message):
    argv = ["decompose", "--model", str(models["short"]), "--out", str(no_loading / "out")]
    _refused([*argv, *args], message, capsys, no_loading)


@pytest.mark.parametrize(
    ("args", "flag"),
    [(["--length", "scale:2"], "--length"), (["--trained-context", "64"], "--trained-context")],
)
def test_decompose_refuses_past_context_figures_without_tokens_past_c(
    models, no_weights, capsys, args, flag
):
    argv = ["decompose", "--model", str(models["short"]), "--tokens", "64", *args]
    message = f"{flag}: the past-context figures compare the fit before and past C = 64"
    _refused([*argv, "--out", str(no_weights / "out")], message, capsys, no_weights)


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--layers", ""], "--layers '': give a layer (12)"),
        (["--layers", " "], "or leave --layers out for every layer"),
        (["--positions", ""], "--positions '': give a position scheme (e.g. swap:0.2)"),
        (["--features", ""], "--features '': give a feature scheme (e.g. rope_noise:1)"),
    ],
)
def test_layers_refuses_an_empty_value(models, no_loading, capsys, args, message):
    _refused(["layers", "--model", str(models["short"]), *args], message, capsys, no_loading)


def test_layers_refuses_a_length_run_without_the_plain_model(models, no_loading, capsys):
    run = no_loading.parent / "length-run"
    run.mkdir()
    drift = [{"scheme": "scale:2.0", "layer": 0, "drift": 0.1}]
    (run / "length_scores.json").write_text(json.dumps({"drift": drift}))
    argv = ["layers", "--model", str(models["short"]), "--length-run", str(run)]
    _refused(argv, "no drift of the plain model (scheme 'none')", capsys, no_loading)


def test_an_unknown_suite_is_refused_before_the_task_index_is_built(
    models, no_loading, capsys, monkeypatch
):
    from posgen.harness.run import resolve

    def refuse():
        raise AssertionError("lm-eval's task index was built")

    monkeypatch.setenv("POSGEN_CACHE", str(no_loading.parent / "fresh-cache"))
    monkeypatch.setattr(resolve, "shared_task_manager", refuse)
    argv = ["run", "--model", str(models["short"]), "--suite", "hellaswag,nosuch_task_xyz"]
    _refused(argv, "unknown suite or lm-eval task 'nosuch_task_xyz'", capsys, no_loading)


def test_run_length_refuses_a_model_length_cannot_measure_before_the_sweep(
    capped, no_weights, capsys
):
    argv = ["run", "--model", str(capped["final"]), "--kinds", "text", "--length", "quick"]
    _refused(argv, "final_logit_softcapping=30.0", capsys, no_weights)


@pytest.mark.parametrize("model", ["gpt2", "mpt"])
def test_run_length_refuses_a_model_whose_positions_are_not_rotary(
    models, no_weights, capsys, model
):
    argv = ["run", "--model", str(models[model]), "--kinds", "text", "--length", "quick"]
    _refused(argv, "positions and the run's length schemes are rotary", capsys, no_weights)


RUN_OPTIONS = [
    (["--gen-kwargs", "max_gen_toks"], "--gen-kwargs: expected `key=value`, got 'max_gen_toks'"),
    (["--gen-kwargs", "max_gen_toks=4,until"], "expected `key=value`, got 'until'"),
    (["--gen-kwargs", ""], "--gen-kwargs: empty; give key=value pairs"),
    (["--gen-kwargs", "=4"], "--gen-kwargs: '' is not an argument name"),
    (["--gen-kwargs", "{max_gen_toks: 4}"], "--gen-kwargs: Invalid JSON"),
    (["--gen-kwargs", "temperature=nan"], "temperature=nan cannot be recorded"),
    (["--fewshot-as-multiturn"], "--fewshot-as-multiturn needs --apply-chat-template"),
    (["--system-instruction", " "], "--system-instruction: give the instruction's text"),
]


@pytest.mark.parametrize(("args", "message"), RUN_OPTIONS)
def test_run_refuses_malformed_lm_eval_options(models, no_loading, capsys, args, message):
    _refused(["run", "--model", str(models["short"]), *args], message, capsys, no_loading)


@pytest.mark.parametrize(
    ("name", "message"), [("absent", "no such folder"), ("f", "is not a folder")]
)
def test_run_and_ingest_refuse_a_missing_include_folder(models, no_loading, capsys, name, message):
    path = no_loading.parent / name
    if name == "f":
        path.write_text("a file")
    argv = ["--include-path", str(path)]
    _refused(
        ["run", "--model", str(models["short"]), *argv], f"{path}: {message}", capsys, no_loading
    )
    lm_out = no_loading.parent / "lm-out"
    lm_out.mkdir(exist_ok=True)
    ingest = ["ingest", str(lm_out), "--out", str(no_loading / "run"), *argv]
    _refused(ingest, f"--include-path {path}: {message}", capsys, no_loading)


def test_run_refuses_a_task_of_its_own_folder_that_posgen_cannot_score(
    models, no_loading, capsys, monkeypatch
):
    from lm_eval_task_fixtures import task_folder
    from posgen.harness.run import resolve
    from posgen.tasks.lm_eval_tasks import PosgenTaskManager

    tasks = task_folder(no_loading.parent / "own")

    def only_included(include_path=()):  # the folder's tasks alone: no lm-eval index
        return PosgenTaskManager(include_path=list(include_path), include_defaults=False)

    monkeypatch.setenv("POSGEN_CACHE", str(no_loading.parent / "fresh-cache"))
    monkeypatch.setattr(resolve, "shared_task_manager", only_included)
    argv = ["run", "--model", str(models["short"]), "--include-path", str(tasks)]
    message = "posgen can score none of the metrics of 'posgen_t_unscored'"
    _refused([*argv, "--suite", "posgen_t_unscored"], message, capsys, no_loading)
    _refused(
        [*argv, "--suite", "posgen_t_nosuch"],
        "did you mean posgen_t_yesno, posgen_t_unscored",
        capsys,
        no_loading,
    )


@pytest.mark.parametrize(
    "argv",
    [
        ["decompose"],
        ["length", "--trained-context", "32", "--decompose"],
        ["cause"],
        ["layers"],
    ],
)
def test_a_family_registered_with_a_logits_refusal_is_refused_by_what_fits_its_logits(
    tiny_model_dir, unfitted_falcon, no_weights, capsys, argv
):
    """A family registered with a ``logits_refusal`` (Falcon-ALiBi's, for this test): each
    command that fits its logits refuses it in one line before weights load."""
    model = str(tiny_model_dir("falcon_alibi", 0))
    capsys.readouterr()  # building the model prints its own progress
    message = "no rotary position embedding" if argv[0] in ("cause", "layers") else unfitted_falcon
    _refused([argv[0], "--model", model, *argv[1:]], message, capsys, no_weights)


@pytest.mark.parametrize("command", ["layers", "cause"])
def test_layers_and_cause_refuse_a_seed_out_of_range_first(no_loading, capsys, command):
    """The seed hf-posgen is set with must be in [0, 2**32), as posgen run's: refused with
    the other arguments, not by the model once its weights have loaded."""
    argv = [command, "--seed", "-1", "--out", str(no_loading / "out")]
    _refused(argv, "--seed must be an integer in [0, 2**32), got -1", capsys, no_loading)
