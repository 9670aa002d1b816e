"""The typed configuration of a run folder: models, sweep, cells, scoring.

One shape for every reader and writer: :mod:`posgen.harness.run.resolve` builds it for
``posgen run``, :mod:`posgen.results.ingest` for an ingested run; ``RunStore.start``
stores it and the sweep, report, scores and gate read it back (``RunStore.run_config``,
:meth:`RunConfig.from_dict`); its cells are :func:`posgen.results.folder.plan.plan_cells`.
``posgen length`` and ``posgen layers`` have theirs beside it
(:mod:`~posgen.results.folder.length_config`, :mod:`~posgen.results.folder.layers_config`).
``to_dict()`` gives exactly the dicts of earlier releases (optional fields only when set),
so the config hash that names a run and the stored ``config.json`` are unchanged.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field, fields
from typing import Any

from posgen.results.folder.depth_config import DepthSweep  # the run config's depth part


@dataclass(frozen=True)
class ModelEntry:
    """One model of a run: how to load it and how to name it.

    ``label`` names it in folders, tables and printed output; ``path`` is what loads it (a
    local folder, a hub id or ``embedded``); ``revision`` pins the weights that were read
    (a local folder's: ``local-content:<16 hex>`` of its files' content). A local folder's
    ``legacy_revision`` is the revision earlier releases recorded for it (``local:<12
    hex>``: config.json and the weight files' names and sizes), never stored and never
    compared: what lets a folder written by them resume
    (:mod:`posgen.results.folder.model_identity`).
    """

    label: str
    path: str
    embedded: bool
    revision: str
    dtype: str = "float32"
    random_init: bool = False
    # lm-eval ``hf`` loading options; in the config only when set (hashes stay as they were)
    trust_remote_code: bool = False
    attn_implementation: str | None = None
    peft: str | None = None
    device_map: str | None = None  # 'auto', 'balanced', a device, or a JSON {module: device}
    rope: bool = True  # False: no rotary position embedding
    # where the model's positions enter (posgen.harness.model_side.family): rotary, absolute,
    # alibi, none, or unadapted (an ALiBi attention whose logits the commands do not fit:
    # a family registered with a logits_refusal; hf-posgen moves its positions)
    positions: str = "rotary"
    legacy_revision: str | None = field(default=None, compare=False, repr=False)

    @property
    def model_side(self) -> bool:
        """Whether posgen can move this model's positions: its position and feature cells
        and the attention-logit decomposition apply (RoPE, learned absolute, BLOOM, MPT and
        Falcon ALiBi)."""
        if self.positions == "rotary":
            return self.rope
        return self.positions in ("absolute", "alibi")

    def to_dict(self) -> dict[str, Any]:
        return {
            "label": self.label,
            "path": self.path,
            "embedded": self.embedded,
            "revision": self.revision,
            "dtype": self.dtype,
            "random_init": self.random_init,
            **{
                k: v
                for k, v in self.load_options().items()
                if k not in ("revision", "parallelize", "device_map")
            },
            **({"device_map": self.device_map} if self.device_map else {}),
            **({} if self.rope else {"rope": False}),
            **({} if self.positions == "rotary" else {"positions": self.positions}),
        }

    def load_options(self) -> dict[str, Any]:
        """Keyword arguments of lm-eval's ``hf`` model beyond ``pretrained`` and ``dtype``:
        the resolved commit of a hub model, and the options the user set."""
        out: dict[str, Any] = {}
        if self.revision and len(self.revision) == 40 and not self.embedded:
            out["revision"] = self.revision  # a hub commit: load exactly what was recorded
        if self.trust_remote_code:
            out["trust_remote_code"] = True
        if self.attn_implementation:
            out["attn_implementation"] = self.attn_implementation
        if self.peft:
            out["peft"] = self.peft
        if self.device_map:
            # lm-eval 0.4.13's HFLM passes device_map to from_pretrained only with
            # parallelize=True (otherwise it replaces it by None or the --device)
            out["parallelize"] = True
            out["device_map"] = decode_device_map(self.device_map)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ModelEntry:
        return cls(**{f.name: d[f.name] for f in fields(cls) if f.name in d})

    def info(self) -> dict[str, Any]:
        """The model columns of every result row (``posgen.results.tables.tidy``)."""
        return {
            "model_path": str(self.path),
            "model_revision": self.revision,
            "dtype": self.dtype,
            "random_init": self.random_init,
        }


def decode_device_map(text: str) -> str | dict[str, Any]:
    """``--device-map`` as transformers' ``from_pretrained`` takes it: a strategy or
    device name as given, or a JSON object ``{"module.name": device}`` as a dict."""
    return json.loads(text) if text.lstrip().startswith("{") else text


@dataclass(frozen=True)
class SweepAxis:
    """The schemes of one perturbation kind and the values swept for each."""

    schemes: tuple[str, ...]
    values: tuple[float, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"schemes": list(self.schemes), "values": list(self.values)}


@dataclass(frozen=True)
class Decompose:
    """The probe of the attention-logit decomposition: ``docs`` windows of ``tokens``."""

    docs: int
    tokens: int

    def to_dict(self) -> dict[str, Any]:
        return {"docs": self.docs, "tokens": self.tokens}


@dataclass(frozen=True)
class Scoring:
    """Tolerance thresholds, the bootstrap and the perplexity interval of
    ``posgen.results.scores.scoring`` (all recorded in scores.json)."""

    # tolerance thresholds (posgen.results.scores.metric_units.threshold): the relative
    # perplexity increase allowed (also bits per byte's, and 10 % of a corpus figure),
    # and the drop allowed on a [0, 1] score such as accuracy
    threshold_ppl: float = 0.10
    threshold_acc: float = 0.05
    iters: int = 2000  # bootstrap replicates
    seed: int = 0  # bootstrap seed
    confidence: float = 0.95
    interval: str = "log-t"  # perplexity CI method (posgen.results.stats.intervals.METHODS)

    def to_dict(self) -> dict[str, Any]:
        # the interval only when not the default, so existing config hashes hold
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        if d["interval"] == "log-t":
            del d["interval"]
        return d


@dataclass(frozen=True)
class RunConfig:
    """Everything a run's results depend on (hashed to name and guard its folder)."""

    posgen_version: str
    schema_version: int
    lm_eval_version: str
    suite: str
    suite_version: int | None
    tasks: tuple[str, ...]
    limits: Mapping[str, int]
    preset: str
    seed: int
    random_init_seed: int | None  # None: no random-init twin can be asked for (ingest)
    models: tuple[ModelEntry, ...]
    batch_size: int | str | None  # N, or lm-eval's auto / auto:N; None: not known (ingest)
    sweep: Mapping[str, SweepAxis]  # kind -> axis, in sweep order
    decompose: Decompose
    scoring: Scoring
    seeds: int = 1  # perturbation seeds per cell: seed, seed+1, ...
    # lm-eval's prompt settings, passed to simple_evaluate for every cell
    num_fewshot: int | None = None  # None: each task's own default
    apply_chat_template: bool | str = False  # True, or a named template of the tokenizer
    # each only when set: generation arguments over the tasks' own (``--gen-kwargs``), a
    # system prompt, few-shot examples as chat turns (None: as lm-eval's CLI, with a chat
    # template only), folders of the user's own task YAML (absolute)
    gen_kwargs: Mapping[str, Any] | None = None
    system_instruction: str | None = None
    fewshot_as_multiturn: bool | None = None
    include_path: tuple[str, ...] = ()
    depth: DepthSweep | None = None  # ``--kinds depth``: the evidence-depth cells
    # an ingested run (``posgen ingest``): the lm-eval results files it was read from and
    # the lm-eval release that read them
    ingested_from: tuple[str, ...] = ()
    installed_lm_eval_version: str | None = None

    def to_dict(self) -> dict[str, Any]:
        # "seeds" only when > 1 and the prompt settings only when set, so a run without
        # them keeps its config hash and folder
        return {
            **self._options_set(),
            **({"seeds": self.seeds} if self.seeds > 1 else {}),
            **({"num_fewshot": self.num_fewshot} if self.num_fewshot is not None else {}),
            **(
                {"apply_chat_template": self.apply_chat_template}
                if self.apply_chat_template
                else {}
            ),
            "posgen_version": self.posgen_version,
            "schema_version": self.schema_version,
            "lm_eval_version": self.lm_eval_version,
            "suite": self.suite,
            "suite_version": self.suite_version,
            "tasks": list(self.tasks),
            "limits": dict(self.limits),
            "preset": self.preset,
            "seed": self.seed,
            "random_init_seed": self.random_init_seed,
            "models": [m.to_dict() for m in self.models],
            **({"batch_size": self.batch_size} if self.batch_size is not None else {}),
            "sweep": {kind: axis.to_dict() for kind, axis in self.sweep.items()},
            **({"depth": self.depth.to_dict()} if self.depth is not None else {}),
            "decompose": self.decompose.to_dict(),
            "scoring": self.scoring.to_dict(),
            **(
                {
                    "installed_lm_eval_version": self.installed_lm_eval_version,
                    "ingested_from": list(self.ingested_from),
                }
                if self.ingested_from
                else {}
            ),
        }

    def _options_set(self) -> dict[str, Any]:
        """The lm-eval options a run was given beyond the prompt settings, each only when
        set (``include_path`` as a list)."""
        out: dict[str, Any] = {}
        if self.gen_kwargs is not None:
            out["gen_kwargs"] = dict(self.gen_kwargs)
        if self.system_instruction is not None:
            out["system_instruction"] = self.system_instruction
        if self.fewshot_as_multiturn is not None:
            out["fewshot_as_multiturn"] = self.fewshot_as_multiturn
        if self.include_path:
            out["include_path"] = list(self.include_path)
        return out

    def multiturn(self) -> bool:
        """Few-shot examples as chat turns: as set, else with a chat template only (the
        default of lm-eval's CLI)."""
        if self.fewshot_as_multiturn is not None:
            return self.fewshot_as_multiturn
        return bool(self.apply_chat_template)

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> RunConfig:
        """The config of a stored run (``RunStore.config``)."""
        return cls(
            **{k: d[k] for k in _PLAIN_KEYS},
            batch_size=d.get("batch_size"),
            tasks=tuple(d["tasks"]),
            limits=dict(d["limits"]),
            models=tuple(ModelEntry.from_dict(m) for m in d["models"]),
            sweep={
                kind: SweepAxis(tuple(a["schemes"]), tuple(a["values"]))
                for kind, a in d["sweep"].items()
            },
            decompose=Decompose(**d["decompose"]),
            scoring=Scoring(**d["scoring"]),
            seeds=int(d.get("seeds", 1)),
            num_fewshot=d.get("num_fewshot"),
            apply_chat_template=d.get("apply_chat_template", False),
            gen_kwargs=d.get("gen_kwargs"),
            system_instruction=d.get("system_instruction"),
            fewshot_as_multiturn=d.get("fewshot_as_multiturn"),
            include_path=tuple(d.get("include_path", ())),
            depth=DepthSweep.from_dict(d.get("depth")),
            ingested_from=tuple(d.get("ingested_from", ())),
            installed_lm_eval_version=d.get("installed_lm_eval_version"),
        )


_PLAIN_KEYS = (
    "posgen_version",
    "schema_version",
    "lm_eval_version",
    "suite",
    "suite_version",
    "preset",
    "seed",
    "random_init_seed",
)


# the perturbation kinds that act inside the model (not on the text), each with the
# ``hf-posgen`` model argument that carries it; a model without RoPE gets none of them
MODEL_SIDE_KINDS = {"position": "positions", "feature": "features"}


@dataclass(frozen=True)
class Cell:
    """One (task, perturbation) evaluation of a model; ``kind == "none"`` is the baseline.

    ``positions`` / ``features`` are the model-side perturbation strings given to
    ``hf-posgen`` (None for text and baseline cells).
    """

    cell_id: str
    task: str
    lm_eval_task: str
    kind: str
    scheme: str
    rate: float
    seed: int
    perturbation_spec: str = ""
    perturbation_version: int = 0
    positions: str | None = None
    features: str | None = None

    def record(self) -> dict[str, Any]:
        """The cell's columns of its stored record (``posgen.results.tables.tidy.cell_record``)."""
        return {
            "task": self.task,
            "lm_eval_task": self.lm_eval_task,
            "kind": self.kind,
            "scheme": self.scheme,
            "rate": self.rate,
            "seed": self.seed,
            "perturbation_spec": self.perturbation_spec,
            "perturbation_version": self.perturbation_version,
        }

    def to_dict(self) -> dict[str, Any]:
        return {
            "cell_id": self.cell_id,
            **self.record(),
            "model_args": {"positions": self.positions, "features": self.features},
        }
