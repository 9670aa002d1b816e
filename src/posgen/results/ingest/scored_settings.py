"""The settings of an lm-eval run that change what it scores: one table, a reason each.

A perturbed cell's degradation is its figure against its baseline's, the same model and
task unperturbed. Any other difference between the two runs passes for degradation: an
``hf-posgen`` output with ``max_length=64`` ingested against a default baseline showed
+187 % perplexity at swap 0.01, the shorter window and not the perturbation. So each
setting of :data:`SCORED` must be the same across the ingested cells of one model (its
``scope``: ``model``; ``task``, the cells of one model and task; ``lm_eval_task``, those
that ran one lm-eval task) or the outputs are refused, naming the setting, both values
and both results files. Adding one is one line.

Where lm-eval 0.4.13 records them (``evaluator.simple_evaluate``,
``loggers.evaluation_tracker``, ``loggers.utils.add_tokenizer_info``): ``config.model_args``
as given (parsed to a dict by the CLI); what loaded, ``config.model_dtype``,
``model_revision``, ``model_sha``, ``model_num_parameters`` (``HFLM.get_model_info``;
``hf-posgen`` adds ``posgen_model``: the folder's resolved path and content revision);
the window ``max_length`` and the tokenizer's special tokens at the top level;
``chat_template`` / ``chat_template_sha``, ``system_instruction``,
``fewshot_as_multiturn``; ``config.limit`` and ``config.fewshot_seed``; per task ``n-shot``
and ``configs[task]`` (with the ``generation_kwargs`` a generative task ran with, lm_eval's
``--gen_kwargs`` merged in). ``--samples`` is not recorded: the documents themselves are
compared, cell against baseline, when the cells are read (``records``).

``config.batch_size``, ``batch_sizes`` and ``device`` are recorded beside
``model_args``, not in them, and change no figure (hf-posgen's answers are the same at
batch sizes 1 and 8: ``tests/harness/hf_posgen/test_batch_invariance.py``); they and the
other placement arguments of :data:`NOT_SCORED` are never compared. A model argument in
neither table nor among the perturbation's own (:data:`PERTURBATION_ARGS`, the sweep) is
compared too: an argument posgen does not know may change what is scored.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from posgen.results.folder.config import MODEL_SIDE_KINDS
from posgen.results.folder.schema import SchemaError
from posgen.results.ingest.lm_eval_output import UNREPRESENTABLE, EvaluatedTask, model_args

NOT_RECORDED = object()  # the output does not say: nothing to compare


@dataclass(frozen=True)
class Setting:
    """One setting that changes what is scored: ``read(ev)`` its value in an output
    (:data:`NOT_RECORDED` where the output does not say), ``args`` the model arguments
    it reads (not compared again as unknown arguments)."""

    name: str
    read: Callable[[EvaluatedTask], Any]
    reason: str
    scope: str = "model"
    args: tuple[str, ...] = ()


def _norm(value: Any) -> Any:
    """A value as lm-eval's parser reads a model argument: ``"true"`` and ``True``,
    ``"64"``, ``64.0`` and ``64`` alike."""
    if isinstance(value, str):
        text = value.strip()
        if text.lower() in ("true", "false"):
            return text.lower() == "true"
        try:
            value = float(text)
        except ValueError:
            return text
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def arg(name: str, reason: str, default: Any = None) -> Setting:
    """A row reading the model argument ``name`` (absent: lm-eval's ``default``)."""
    return Setting(
        name, lambda ev: _norm(model_args(ev.config).get(name, default)), reason, args=(name,)
    )


def _recorded(where: Callable[[EvaluatedTask], Mapping[str, Any]], key: str) -> Callable:
    def read(ev: EvaluatedTask) -> Any:
        holder = where(ev)
        return holder[key] if isinstance(holder, Mapping) and key in holder else NOT_RECORDED

    return read


def _top(key: str) -> Callable:
    return _recorded(lambda ev: ev.results, key)


def _config(key: str) -> Callable:
    return _recorded(lambda ev: ev.config, key)


def _dtype(ev: EvaluatedTask) -> Any:
    loaded = ev.config.get("model_dtype") or model_args(ev.config).get("dtype")
    return str(loaded).removeprefix("torch.") if loaded else NOT_RECORDED


def _max_length(ev: EvaluatedTask) -> Any:
    window = ev.results.get("max_length", model_args(ev.config).get("max_length"))
    return NOT_RECORDED if window is None else _norm(window)


def _revision(ev: EvaluatedTask) -> Any:
    given = model_args(ev.config).get("revision") or ev.config.get("model_revision") or "main"
    return (str(given), ev.config.get("model_sha") or None)


def _special_tokens(ev: EvaluatedTask) -> Any:
    keys = ("tokenizer_bos_token", "tokenizer_eos_token", "eot_token_id")
    if not any(k in ev.results for k in keys):
        return NOT_RECORDED
    return [ev.results.get(k) for k in keys]


def _chat_template(ev: EvaluatedTask) -> Any:
    if "chat_template" not in ev.results:
        return NOT_RECORDED
    template = ev.results.get("chat_template")
    return ev.results.get("chat_template_sha") or template  # None: no template applied


def _multiturn(ev: EvaluatedTask) -> Any:
    """Few-shot examples as turns matter under a chat template only."""
    return bool(ev.results.get("fewshot_as_multiturn")) if ev.results.get("chat_template") else None


def _n_shot(ev: EvaluatedTask) -> Any:
    shots = (ev.results.get("n-shot") or {}).get(ev.lm_eval_task)
    return NOT_RECORDED if shots is None else _norm(shots)


def _fewshot_seed(ev: EvaluatedTask) -> Any:
    """The seed that draws the examples, where there are any."""
    shots = _n_shot(ev)
    if shots is NOT_RECORDED or not shots or "fewshot_seed" not in ev.config:
        return None
    return _norm(ev.config["fewshot_seed"])


def _generation(ev: EvaluatedTask) -> Any:
    cfg = ev.task_config
    if cfg.get("output_type") != "generate_until":
        return None
    return cfg.get("generation_kwargs") or {}


def _limit(ev: EvaluatedTask) -> Any:
    return _norm(ev.config["limit"]) if "limit" in ev.config else NOT_RECORDED


# the fields of a task's config that make its prompts, targets, metrics and data
TASK_FIELDS = (
    "dataset_path", "dataset_name", "dataset_kwargs", "test_split", "validation_split",
    "fewshot_split", "process_docs", "custom_dataset", "doc_to_text", "doc_to_target",
    "doc_to_choice", "gen_prefix", "description", "target_delimiter", "fewshot_delimiter",
    "fewshot_config", "output_type", "metric_list", "filter_list", "process_results", "repeats",
)  # fmt: skip


def _task_definition(ev: EvaluatedTask) -> Any:
    cfg = ev.task_config
    if not cfg:
        return NOT_RECORDED
    version = (cfg.get("metadata") or {}).get("version")
    return {"version": version, **{k: cfg[k] for k in TASK_FIELDS if k in cfg}}


SCORED: tuple[Setting, ...] = (
    Setting("pretrained path", _recorded(lambda ev: ev.config.get("posgen_model"), "path"),
            "the model folder the name resolved to (a relative pretrained= resolves from where "
            "lm_eval ran)"),
    Setting("model content", _recorded(lambda ev: ev.config.get("posgen_model"), "revision"),
            "the model's weights, config and tokenizer: a checkpoint rewritten in place is "
            "another model under the same name"),
    Setting("model_num_parameters", _config("model_num_parameters"),
            "another parameter count is another model under the same name"),
    Setting("revision", _revision, "which commit of a hub model loaded", args=("revision",)),
    Setting("dtype", _dtype, "the precision every logit is computed in", args=("dtype",)),
    Setting("max_length", _max_length, "the window each document is scored in: a shorter one "
            "gives every token less context", args=("max_length",)),
    Setting("tokenizer", lambda ev: _norm(model_args(ev.config).get("tokenizer")),
            "another tokenizer scores other tokens", args=("tokenizer",)),
    Setting("special tokens", _special_tokens, "the BOS, EOS and end-of-text tokens every "
            "context and answer is built with"),
    arg("add_bos_token", "whether a BOS token opens every context"),
    arg("prefix_token_id", "the token a rolling window's first prediction is made from"),
    arg("trust_remote_code", "the model's own code runs instead of transformers'", False),
    arg("use_fast_tokenizer", "the slow and the fast tokenizer may split text apart", True),
    arg("truncation", "whether contexts longer than the window are cut", False),
    arg("softmax_dtype", "the precision of the log-probabilities"),
    arg("mixed_precision_dtype", "the precision the forward runs in"),
    arg("attn_implementation", "another attention kernel computes other logits (in the last "
        "digits, or more in half precision)"),
    arg("backend", "a causal or a sequence-to-sequence reading of the model", "default"),
    arg("subfolder", "which folder of the repository loads", ""),
    arg("peft", "an adapter on the weights"),
    arg("delta", "delta weights added to the weights"),
    arg("gguf_file", "a quantized file loaded in place of the weights"),
    arg("autogptq", "GPTQ-quantized weights", False),
    arg("gptqmodel", "GPTQ-quantized weights", False),
    arg("think_end_token", "where a generated answer is cut after its thinking"),
    arg("enable_thinking", "whether the chat template asks for thinking"),
    arg("chat_template_args", "arguments of the chat template"),
    Setting("chat template", _chat_template, "the template every prompt is rendered with"),
    Setting("fewshot_as_multiturn", _multiturn, "few-shot examples as chat turns or as one "
            "user turn"),
    Setting("system_instruction", _top("system_instruction"), "a system instruction before "
            "every prompt"),
    Setting("num_fewshot", _n_shot, "the few-shot examples before each document", "task"),
    Setting("fewshot_seed", _fewshot_seed, "which few-shot examples are drawn", "task"),
    Setting("generation_kwargs", _generation, "how a generative task's answers are generated: "
            "their length, stop sequences, sampling", "task"),
    Setting("limit", _limit, "which documents are scored", "task"),
    Setting("task definition", _task_definition, "the task as lm-eval ran it: its prompt, "
            "target, metrics and data (a task YAML edited between the runs)", "lm_eval_task"),
)  # fmt: skip

# model arguments that change no figure, each with why (never compared)
NOT_SCORED: dict[str, str] = {
    "pretrained": "it names the model: cells are grouped by it",
    "batch_size": "how many requests share a forward; padding is masked or on the right",
    "max_batch_size": "the largest batch an automatic batch size may pick",
    "device": "where the model runs",
    "parallelize": "where the weights are placed",
    "device_map": "where the weights are placed",
    "max_memory_per_gpu": "where the weights are placed",
    "max_cpu_memory": "where the weights are placed",
    "offload_folder": "where weights that do not fit are kept",
    "tp_plan": "how the weights are split over devices",
    "logits_cache": "reuses the logits of requests that share a context: the same figures",
}

# hf-posgen's own arguments: the perturbation of each cell, which is the sweep
# (layers=, heads=, logits=, length= are refused when the cells are read)
PERTURBATION_ARGS = frozenset({*MODEL_SIDE_KINDS.values(), "perturb_seed", *UNREPRESENTABLE})


def settings_of(evs: Iterable[EvaluatedTask]) -> tuple[Setting, ...]:
    """:data:`SCORED`, and a row for each other model argument the outputs give."""
    known = {a for s in SCORED for a in s.args} | set(NOT_SCORED) | PERTURBATION_ARGS
    given = sorted({k for ev in evs for k in model_args(ev.config)} - known)
    unknown = tuple(
        arg(k, "an argument posgen does not know, which may change what is scored") for k in given
    )
    return SCORED + unknown


def _group(setting: Setting, label: str, cell: Mapping[str, Any], ev: EvaluatedTask) -> tuple:
    if setting.scope == "task":
        return (label, cell["task"])
    if setting.scope == "lm_eval_task":
        return (label, ev.lm_eval_task)
    return (label,)


def check_scored_settings(items: list[tuple[str, Mapping[str, Any], EvaluatedTask]]) -> None:
    """Refuse (:class:`SchemaError`, one line) cells of one model made with different
    values of a setting that changes what is scored."""
    for setting in settings_of(ev for *_, ev in items):
        seen: dict[tuple, tuple[Any, EvaluatedTask]] = {}
        for label, cell, ev in items:
            value = setting.read(ev)
            if value is NOT_RECORDED:
                continue
            first, where = seen.setdefault(_group(setting, label, cell, ev), (value, ev))
            if value != first:
                a, b = _differing(first, value)
                raise SchemaError(
                    f"{label}: the cells were run with different {setting.name}: {a} in "
                    f"{where.where}, {b} in {ev.where} ({setting.reason}); a perturbed cell "
                    f"compares with its baseline only under the same {setting.name}: ingest "
                    "outputs made alike"
                )


def _differing(first: Any, value: Any, limit: int = 100) -> tuple[str, str]:
    """The two values as the refusal shows them: of two dicts the entries that differ,
    each side cut to ``limit`` characters."""
    if isinstance(first, Mapping) and isinstance(value, Mapping):
        keys = sorted(k for k in {*first, *value} if first.get(k) != value.get(k))
        first, value = {k: first.get(k) for k in keys}, {k: value.get(k) for k in keys}
    texts = [repr(v).replace("\n", " ") for v in (first, value)]
    a, b = (t if len(t) <= limit else t[: limit - 3] + "..." for t in texts)
    return a, b
