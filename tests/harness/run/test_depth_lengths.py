"""``--depth-lengths``: lengths parsed, resolved to the built-in depth tasks' variants with
a tiny model's own tokenizer (no weights, no run), and recorded in the depth sweep."""

from __future__ import annotations

import argparse

import pytest
from transformers import AutoTokenizer

from posgen.harness.cli.run import configure_parser
from posgen.harness.loading.entries import model_entries
from posgen.harness.loading.options import LoadOptions
from posgen.harness.run.depth_lengths import parse_lengths, with_lengths
from posgen.harness.run.depth_sweep import depth_limit, depth_sweep
from posgen.harness.run.options import PlanError
from posgen.results.folder.depth_config import DepthSweep
from posgen.tasks.depth_lengths import passages_for_length

TASKS = ("posgen_kv", "posgen_passage_qa")
C = 2048  # the tiny models' max_position_embeddings


def entries(*paths) -> list:
    args = argparse.ArgumentParser()
    configure_parser(args)
    options = LoadOptions.from_args(args.parse_args([]))
    return model_entries([str(p) for p in paths], options, random_init=False, seed=0)


def test_lengths_parse_as_fractions_of_c_or_token_counts():
    asked = parse_lengths("0.25, 1.0,512,0.25")
    assert [(a.text, a.fraction, a.tokens) for a in asked] == [
        ("0.25", 0.25, None),
        ("1.0", 1.0, None),
        ("512", None, 512),
    ]


@pytest.mark.parametrize("text", ["1", "0", "1.5", "0.0", "-0.5", "abc", "2.0", "nan", ","])
def test_a_length_neither_fraction_nor_token_count_is_refused(text):
    with pytest.raises(PlanError, match="--depth-lengths") as e:
        parse_lengths(text)
    assert "\n" not in str(e.value)


def test_lengths_resolve_to_variants_with_the_models_tokenizer(tiny_model_dir):
    path = tiny_model_dir("llama", 0)
    tok = AutoTokenizer.from_pretrained(path)

    def count(s: str) -> int:
        return len(tok(s).input_ids)

    depth = DepthSweep((0.0, 1.0), TASKS)
    out = with_lengths(depth, "1200,0.25", entries(path))
    assert out is not None and out.context == C and out.depths == depth.depths
    want = {(t, n): passages_for_length(t, n, count) for t in TASKS for n in (512, 1200)}
    assert out.tasks == tuple(want[(t, n)].task for t in TASKS for n in (512, 1200))
    assert len(set(out.tasks)) == 4  # two lengths, two tasks: four variants
    for length in out.lengths:  # each (length, task) as passages_for_length chose it
        choice = want[(length.base_task, length.target_tokens)]
        assert (length.task, length.n_passages, length.max_tokens) == (
            choice.task,
            choice.n_passages,
            choice.max_tokens,
        )
        assert length.mean_tokens == pytest.approx(choice.mean_tokens, abs=0.051)
    short = next(x for x in out.lengths if x.base_task == "posgen_kv" and x.asked == "0.25")
    assert short.fraction == 0.25 and short.target_tokens == 512
    assert out.titles()[short.task] == (
        f"posgen_kv at 0.25 C (n{short.n_passages}, {short.mean_tokens:,.0f} tokens)"
    )
    # recorded: the stored dict reads back to the same sweep
    stored = out.to_dict()
    assert stored["context"] == C and len(stored["lengths"]) == 4
    assert DepthSweep.from_dict(stored) == out
    # every variant keeps its task's documents: --limit caps it as the task's own
    assert {depth_limit(t, 100, "default") for t in out.tasks} == {24}


def test_without_depth_lengths_the_sweep_and_its_dict_are_as_before(tiny_model_dir):
    args = argparse.Namespace(depths="0,1", depth_account=None, quick=False)
    depth = depth_sweep(args, ("depth",), None, None)
    assert with_lengths(depth, None, entries(tiny_model_dir("llama", 0))) is depth
    assert depth.to_dict() == {
        "depths": [0.0, 1.0],
        "tasks": ["posgen_kv", "posgen_kv_mc", "posgen_kv_gen", "posgen_passage_qa"],
    }


@pytest.mark.parametrize(
    "arch,want",
    [("llama", ("max_position_embeddings", 2048)), ("gpt2", ("max_position_embeddings", 64)),
     ("mpt", ("max_seq_len", 64))],
)  # fmt: skip
def test_the_trained_context_c_is_read_from_each_familys_config(arch, want):
    from transformers import AutoConfig

    from posgen.harness.model_side.family import trained_context
    from tiny_models import CONFIGS, CONTEXT_FIELDS, MODEL_TYPES

    values = dict(CONFIGS[arch])
    if arch != "llama":
        values[CONTEXT_FIELDS[arch]] = 64
    config = AutoConfig.for_model(MODEL_TYPES.get(arch, arch), **values)
    assert trained_context(config) == want
