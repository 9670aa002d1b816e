"""``posgen length``'s work: per-position NLL and attention drift for every (scheme,
document), into a resumable run folder.

Layout (every file written atomically)::

    RUN/
      config.json                       the resolved LengthRunConfig + its SHA-256
      docs/<scheme>/<document>.json     one finished (scheme, document): bucket NLL sums
                                        and counts, drift sums, seconds
      decompose/<scheme>/<document>.json  with --decompose: the per-head fit on the same
                                        ids under the same forward (.decompose)
      length_scores.json                curves, effective lengths, drift (length_scores)
      length.md, length_curves.png      the report block and its plot
      length_decomposition.png          with --decompose: drift beside r per layer

A rerun with the same config skips finished (scheme, document) files; a folder holding
another config is refused. ``--decompose`` does not change the NLL and drift records: a
rerun with ``--decompose`` on a folder made without it resumes there (config.json then
records it, and only the decompositions are computed); a rerun without ``--decompose``
on a folder made with it is refused (its report would drop the decomposition).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from posgen.harness.length.apply import length_forward
from posgen.harness.length.decompose import decompose_document
from posgen.harness.length.drift import drift_capture
from posgen.harness.length.nll import bucket_sums, position_nll
from posgen.harness.loading import load_model
from posgen.perturbations import parse
from posgen.perturbations.length import LengthPerturbation, parse_length
from posgen.results.folder.config import ModelEntry
from posgen.results.folder.schema import config_hash
from posgen.results.folder.store import RunConflictError, atomic_write_json, read_json
from posgen.results.scores.length import read_records, reference_buckets, result_path
from posgen.results.scores.length_decompose import decomposition_path

LENGTH_SCHEMA = 1


@dataclass(frozen=True)
class LengthRunConfig:
    """Everything that determines the figures of one ``posgen length`` run."""

    model: str
    max_length: int
    trained_context: int
    schemes: tuple[str, ...]
    documents: tuple[str, ...]
    bucket_width: int
    positions: str | None = None
    seed: int = 1234
    chunk: int = 1024
    block_size: int | None = None
    threshold: float = 0.10
    # how the model was loaded (ModelEntry.to_dict()) and each document's source and
    # SHA-256, so that a rerun on another model or other documents is refused
    model_entry: Mapping[str, Any] = field(default_factory=dict)
    document_sources: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    skipped_documents: int = 0  # read before the kept ones, shorter than max_length
    decompose: bool = False  # also fit the decomposition of every (scheme, document)

    def __post_init__(self) -> None:
        if self.max_length < 2 or self.trained_context < 2:
            raise ValueError("max_length and trained_context must be >= 2")
        if self.chunk < 1 or (self.block_size is not None and self.block_size < 1):
            raise ValueError("chunk and block size must be >= 1")
        if self.bucket_width < 1 or self.bucket_width > self.max_length:
            raise ValueError(f"bucket width must be in [1, {self.max_length}]")
        if not self.schemes or not self.documents:
            raise ValueError("give at least one scheme and one document")
        if not (self.threshold > 0 and math.isfinite(self.threshold)):
            raise ValueError(f"threshold must be a finite number > 0, got {self.threshold}")

        reference_buckets(self.bucket_width, self.n_buckets, self.trained_context)

    @property
    def n_buckets(self) -> int:
        return math.ceil(self.max_length / self.bucket_width)

    def to_dict(self) -> dict[str, Any]:
        """The config as JSON; ``decompose`` only when set, so runs made before the flag
        existed keep their hash."""
        out = {
            **asdict(self),
            "schemes": list(self.schemes),
            "documents": list(self.documents),
            "model_entry": dict(self.model_entry),
            "document_sources": {k: dict(v) for k, v in self.document_sources.items()},
        }
        if not self.decompose:
            del out["decompose"]
        return out

    def scored_dict(self) -> dict[str, Any]:
        """:meth:`to_dict` without ``decompose``: what the NLL and drift records depend on
        (and what names the default run folder)."""
        out = self.to_dict()
        out.pop("decompose", None)
        return out

    def parsed_schemes(self) -> list[LengthPerturbation]:
        return [parse_length(s) for s in self.schemes]


def prepare_folder(folder: Path, config: LengthRunConfig) -> None:
    """Write ``config.json``, or check that the folder holds this very config."""
    record = {"schema": LENGTH_SCHEMA, "config": config.to_dict()}
    record["config_sha256"] = config_hash(record["config"])
    path = folder / "config.json"
    if path.exists():
        old = read_json(path, "length run config")
        if old.get("config_sha256") == record["config_sha256"]:
            return
        old_config = dict(old.get("config") or {})
        had_decompose = bool(old_config.pop("decompose", False))
        if config_hash(old_config) != config_hash(config.scored_dict()):
            raise RunConflictError(
                f"{folder} holds a length run with another config; choose another --out"
            )
        if had_decompose:
            raise RunConflictError(
                f"{folder} holds a length run with --decompose; rerun with --decompose "
                f"(it resumes) or choose another --out"
            )
    atomic_write_json(path, record)  # new, or the same run with --decompose added


def _load_groups(schemes: list[LengthPerturbation]) -> dict[str, list[LengthPerturbation]]:
    """Schemes grouped by the model load they need (rope scalings load their own)."""
    groups: dict[str, list[LengthPerturbation]] = {}
    for s in schemes:
        key = "plain" if s.rope_type is None else s.to_string()
        groups.setdefault(key, []).append(s)
    return groups


def _missing(folder: Path, config: LengthRunConfig, scheme: str, doc: str) -> bool:
    """Whether (scheme, document) still lacks its record (or, with ``decompose``, its fit)."""
    if not result_path(folder, scheme, doc).exists():
        return True
    return config.decompose and not decomposition_path(folder, scheme, doc).exists()


def run_documents(
    folder: Path,
    config: LengthRunConfig,
    entry: ModelEntry,
    device: str | None,
    token_ids: dict[str, list[int]],
    log: Callable[[str], None] = print,
) -> None:
    """Compute every missing (scheme, document) file of the run folder; the model is
    loaded through :func:`posgen.harness.loading.load_model`, once per load group, and
    the decomposition (``config.decompose``) runs on that same model and ids."""
    import torch

    positions = parse("position", config.positions) if config.positions else None
    for group in _load_groups(config.parsed_schemes()).values():
        todo = [
            (s, d)
            for s in group
            for d in config.documents
            if _missing(folder, config, s.to_string(), d)
        ]
        if not todo:
            continue
        loaded = load_model(entry, device, length=group[0])
        model = loaded.model
        for scheme, doc in todo:
            input_ids = torch.tensor([token_ids[doc]], dtype=torch.long, device=model.device)
            if not result_path(folder, scheme.to_string(), doc).exists():
                _score_document(folder, config, loaded, scheme, doc, input_ids, positions, log)
            if (
                config.decompose
                and not decomposition_path(folder, scheme.to_string(), doc).exists()
            ):
                decompose_document(
                    folder, config, loaded, scheme, doc, token_ids[doc], positions, log
                )
        del model, loaded


def _score_document(folder, config, loaded, scheme, doc, input_ids, positions, log) -> None:
    """NLL and drift of one (scheme, document), written to its record."""
    model, width, n_buckets = loaded.model, config.bucket_width, config.n_buckets
    start = time.perf_counter()
    with (
        length_forward(model, input_ids, scheme, positions, config.seed, config.block_size),
        drift_capture(model, config.trained_context, width, n_buckets) as drift,
    ):
        nll = position_nll(model, input_ids, config.chunk)
    seconds = time.perf_counter() - start
    sums, counts = bucket_sums(nll, width, n_buckets)
    record = {
        "scheme": scheme.to_string(),
        "spec": scheme.spec.to_dict(),
        "document": doc,
        "n_tokens": int(input_ids.shape[1]),
        "nll_sum": sums.tolist(),
        "count": counts.tolist(),
        "drift": drift[-1].to_dict() if drift else None,
        "seconds": seconds,
        "loaded": loaded.record,
    }
    atomic_write_json(result_path(folder, scheme.to_string(), doc), record)
    log(f"{scheme.to_string():>16}  {doc:<20} {input_ids.shape[1]} tokens  {seconds:.1f} s")


def read_results(folder: Path, config: LengthRunConfig) -> list[dict[str, Any]]:
    """Every (scheme, document) record of the run, in config order; missing ones raise."""
    schemes = [s.to_string() for s in config.parsed_schemes()]
    return read_records(folder, schemes, list(config.documents))
