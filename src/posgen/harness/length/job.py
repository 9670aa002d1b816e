"""A ``posgen length`` run from its typed config: documents, folder, records, scores, report.

``posgen length`` (:mod:`posgen.harness.cli.length`) and ``posgen run --length`` both
build a :class:`LengthJob`: the model entry and device, the
:class:`~posgen.results.folder.length_config.LengthConfig` (from :func:`length_config`,
checked against the model's config by :func:`check_model`), where the documents come
from and how many to keep. :func:`run_job` selects the documents (the config then names
them), prepares the folder and computes what is missing
(:mod:`posgen.harness.length.runner`), then writes the scores and the report once.
Progress lines and notes go to the caller's ``log``; nothing is printed here.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from posgen.harness import loading  # looked up at call time (tests replace its loaders)
from posgen.harness.input_error import InputError
from posgen.harness.length.documents import (
    Document,
    builtin_documents,
    describe_shortfall,
    records,
    select,
)
from posgen.harness.length.nll import head_refusal
from posgen.harness.length.runner import run_documents
from posgen.harness.model_side.attention.length import config_refusal
from posgen.harness.model_side.family import family_of_model_config
from posgen.harness.model_side.family import trained_context as context_field
from posgen.perturbations import PerturbationError
from posgen.perturbations.length import parse_length_list
from posgen.results.folder.config import ModelEntry
from posgen.results.folder.length_config import LengthConfig, LengthFolder
from posgen.results.folder.store import slug
from posgen.results.report.folder_reports import regenerate_length

QUICK_DOCUMENTS = 2
QUICK_SCHEMES = "none;lambda:4,C;infllm;scale:2"
# --quick runs to 1.5 C: four schemes, the window pass and two documents fit in 10 minutes on
# 2 CPU cores there (docs/length.md, "The --quick budget"); at F = 2 they take 15
QUICK_FACTOR = 1.5
ALL_DOCUMENTS = 5  # the built-in documents
DEFAULT_FACTOR = 2.0
# the in-distribution window's default stride S = C / WINDOW_DIVISOR: 2 windows of C tokens
# per document at F = 2, every token past C scored with C/2 … C−1 tokens of context
# (docs/length.md, "In-distribution window", measures what a smaller S changes)
WINDOW_DIVISOR = 2


@dataclass(frozen=True)
class LengthJob:
    """One checked length run. ``config.documents`` is ``("?",)`` until :func:`run_job`
    selects them from ``documents`` (the first ``wanted``, all when None, that reach the
    max length); ``out`` None: the config's default folder."""

    entry: ModelEntry
    device: str | None
    config: LengthConfig
    documents: Iterable[Document]
    wanted: int | None
    out: Path | None = None


@dataclass(frozen=True)
class LengthOutcome:
    """Where the run went and its report block (Markdown)."""

    folder: Path
    markdown: str


def trained_context(model_config: Any, override: int | None = None) -> int:
    """C: ``override``, else the config's ``max_position_embeddings``, else (MPT) the
    number of keys its ALiBi bias covers (``max_seq_len``, its only length field)."""
    if override:
        return int(override)
    trained = context_field(model_config)
    if trained is None:
        raise InputError("the model config has no max_position_embeddings; pass --trained-context")
    return trained[1]


def _bias_keys(model_config: Any) -> tuple[str, int] | None:
    """(config field, value): how many keys the model's ALiBi bias covers, where it is
    built once over a fixed length (MPT's ``max_seq_len``); None where it is built from
    the mask at any length (BLOOM, Falcon) or the model has no such bias."""
    family = family_of_model_config(model_config)
    value = getattr(model_config, family.bias_keys, None) if family.bias_keys else None
    return None if value is None else (family.bias_keys, int(value))


def length_config(
    entry: ModelEntry,
    c: int,
    *,
    schemes: str | None = None,
    max_length: int | None = None,
    factor: float | None = None,
    bucket_width: int | None = None,
    window_stride: int | None = None,
    **settings: Any,
) -> LengthConfig:
    """The config of a run of ``entry`` with trained context ``c``: max length
    ``max_length`` or ``round(factor · C)`` (F = 2), refused unless it passes C (the run
    measures past C), ``schemes`` with ``C`` resolved (default
    ``none;lambda:4,C;scale:F;yarn:F``), buckets of ``bucket_width`` (default C/8);
    in-distribution windows of stride ``window_stride`` (default :data:`WINDOW_DIVISOR`:
    S = C/2) when max length > C; ``settings`` are the other :class:`LengthConfig` fields
    (positions, seed, chunk, block_size, threshold, decompose)."""
    factor = DEFAULT_FACTOR if factor is None else factor
    given = f"--max-length {max_length}" if max_length is not None else f"--factor {factor:g}"
    max_length = max_length if max_length is not None else round(factor * c)
    if max_length <= c:
        default = round(DEFAULT_FACTOR * c)
        raise InputError(
            f"{given}: a max length of {max_length} tokens does not pass the trained context "
            f"C = {c}, and posgen length measures past C; give --max-length > {c} (or "
            f"--factor > 1; the default F = {DEFAULT_FACTOR:g} runs to {default}), or "
            f"--trained-context below {max_length}"
        )
    f_text = f"{max_length / c:g}"
    text = schemes or f"none;lambda:4,C;scale:{f_text};yarn:{f_text}"
    if window_stride is None and max_length > c:
        window_stride = max(1, c // WINDOW_DIVISOR)
    try:
        parsed = parse_length_list(text, c)  # C resolved; infllm completed from C
        return LengthConfig(
            model=entry.label,
            max_length=max_length,
            trained_context=c,
            schemes=tuple(s.to_string() for s in parsed),
            documents=("?",),
            bucket_width=bucket_width or max(1, c // 8),
            model_entry=entry,
            window_stride=window_stride,
            **settings,
        )
    except (ValueError, PerturbationError) as exc:
        raise InputError(str(exc)) from None


def check_model(config: LengthConfig, model_config: Any) -> None:
    """Refuse, from the model's config alone, what the run could not compute: logits that
    are not ``lm_head(hidden)`` (final soft-capping, logit scales), a max length past the
    keys an ALiBi bias built once covers (MPT's ``max_seq_len``), a Λ or InfLLM scheme
    the model's attention does not allow, ``decompose`` without tokens past C."""

    reason = head_refusal(model_config)
    if reason is not None:
        raise InputError(f"{config.model}: {reason}")
    bias_keys = _bias_keys(model_config)
    if bias_keys is not None and config.max_length > bias_keys[1]:
        field, keys = bias_keys
        raise InputError(
            f"max length {config.max_length}: {config.model} builds its ALiBi bias over its "
            f"{field} = {keys} keys and cannot run past them; give --max-length <= {keys} "
            "(and --trained-context below it to measure past C)"
        )
    for scheme in config.parsed_schemes():
        reason = config_refusal(scheme, model_config)
        if reason is not None:
            raise InputError(f"length scheme {scheme.to_string()}: {reason}")
    if config.decompose and config.max_length <= config.trained_context:
        raise InputError(
            f"--decompose compares the fit before and past C = {config.trained_context}: "
            f"it needs a max length > C, got {config.max_length}"
        )


def select_documents(job: LengthJob, log: Callable[[str], None]) -> tuple[LengthConfig, dict]:
    """The run's documents (tokenized, cut to max length) and the config naming them."""

    config = job.config
    tokenizer = loading.load_tokenizer(job.entry)
    sel = select(job.documents, lambda t: tokenizer(t).input_ids, config.max_length, job.wanted)
    shortfall = describe_shortfall(sel, job.wanted, config.max_length)
    if shortfall:
        raise InputError(shortfall)
    if sel.skipped:
        log(f"skipped {sel.skipped} document(s) shorter than {config.max_length} tokens")
    config = replace(
        config,
        documents=tuple(d.doc_id for d in sel.documents),
        document_sources=records(sel.documents),
        skipped_documents=sel.skipped,
    )
    return config, sel.token_ids


def run_job(
    job: LengthJob, progress: Callable[[str], None], note: Callable[[str], None]
) -> LengthOutcome:
    """The whole run: documents, folder (:meth:`LengthFolder.create`: ``--out`` checked,
    locked, resumed or refused), records, then scores and report
    (:func:`~posgen.results.report.folder_reports.regenerate_length`). ``progress`` gets a
    line per (scheme, document) computed, ``note`` what the user should know (documents
    skipped, temporary files of a killed run removed)."""

    config, token_ids = select_documents(job, note)
    with LengthFolder.create(job.out or default_folder(config), config, note=note) as folder:
        try:
            run_documents(folder.root, config, job.entry, job.device, token_ids, progress)
        except ValueError as exc:
            raise InputError(str(exc)) from None
        paths = regenerate_length(folder)
    return LengthOutcome(folder.root, paths["md"].read_text(encoding="utf-8"))


def default_folder(config: LengthConfig) -> Path:
    """The run's default folder; where it does not exist but one an earlier release named
    does, that one: ``posgen-runs/length-<hash>`` (before every command wrote under
    ``posgen-runs/<command>/``), or either name with the hash of the model's legacy
    revision (resumed there with a note, :mod:`posgen.results.folder.model_identity`)."""
    configs, entry = [config], config.model_entry
    if entry is not None and entry.legacy_revision is not None:
        configs.append(replace(config, model_entry=replace(entry, revision=entry.legacy_revision)))
    for c in configs:
        for folder in (c.default_folder(), c.earlier_default_folder()):
            if folder.exists():
                return folder
    return config.default_folder()


def jobs_for_run(
    run_root: Path, entries: Iterable[ModelEntry], schemes: str, device: str | None = None
) -> list[LengthJob]:
    """``posgen run --length``: a length run per (non random-init) model of a sweep into
    ``RUN/length/<model>/``, each loaded as the sweep loaded it (dtype, revision, adapter,
    remote code, attention implementation, device map) on ``device``, on the built-in
    documents (``quick``: 2 documents, schemes ``none;lambda:4,C;scale:2``; else all five
    with ``schemes``). Reads each model's config (no weights) and checks it: a model
    whose positions are not rotary is refused (``posgen length`` runs its scheme none)."""

    quick = schemes == "quick"
    jobs = []
    for entry in entries:
        if entry.random_init:
            continue  # the twin has no trained context to extrapolate from
        model_config = loading.load_config(entry)
        family = family_of_model_config(model_config)
        if family.kind != "rotary":
            raise InputError(
                f"--length: {entry.label} has {family.kind} positions and the run's length "
                "schemes are rotary; posgen length says what applies to it"
            )
        if getattr(model_config, "max_position_embeddings", None) is None:
            raise InputError(
                f"--length: {entry.label}'s config has no max_position_embeddings, so its "
                "trained context is unknown; run posgen length with --trained-context"
            )
        config = length_config(
            entry,
            trained_context(model_config),
            schemes=QUICK_SCHEMES if quick else schemes,
            factor=QUICK_FACTOR if quick else None,
        )
        check_model(config, model_config)
        out = run_root / "length" / slug(entry.label)
        wanted = QUICK_DOCUMENTS if quick else ALL_DOCUMENTS
        jobs.append(LengthJob(entry, device, config, builtin_documents(), wanted, out))
    return jobs
