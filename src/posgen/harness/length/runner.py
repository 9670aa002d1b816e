"""``posgen length``'s work: per-position NLL and attention drift for every (scheme,
document), into a resumable run folder.

Layout (every file written atomically)::

    RUN/
      config.json                       the LengthConfig + its SHA-256
                                        (posgen.results.folder.length_config)
      docs/<scheme>/<document>.json     one finished (scheme, document) (<scheme>:
                                        length_config.scheme_folder): bucket NLL sums
                                        and counts, drift sums, seconds and what they
                                        cover (seconds_cover; prefix_tokens,
                                        prefix_seconds, prefix_shared_by where it
                                        continued the shared prefix, .reuse)
      decompose/<scheme>/<document>.json  with --decompose: the per-head fit on the same
                                        ids under the same forward (.decompose)
      window/<document>.json            the in-distribution window pass (.window): bucket
                                        NLL sums of every token past C scored with C − S …
                                        C − 1 tokens before it at positions 0 … C − 1; one
                                        per document, shared by every scheme
      length_scores.json                curves, effective lengths, drift (length_scores)
      length.md, length_curves.png      the report block and its plot
      length_decomposition.png          with --decompose: drift beside r per layer

A rerun with the same config skips finished (scheme, document) files; a folder holding
another config is refused. ``--decompose`` does not change the NLL and drift records: a
rerun with ``--decompose`` on a folder made without it resumes there (config.json then
records it, and only the decompositions are computed); a rerun without ``--decompose``
on a folder made with it is refused (its report would drop the decomposition). A folder
made before the window pass resumes the same way, adding ``window/`` (config.json then
records the stride); one with another window stride is refused.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from posgen.harness import loading  # looked up at call time (tests replace its loaders)
from posgen.harness.length.decompose import decompose_document
from posgen.harness.length.drift import drift_capture
from posgen.harness.length.nll import bucket_sums, position_nll
from posgen.harness.length.reuse import run_prefix, run_suffix, shared_length, sharing
from posgen.harness.length.window import context_range, window_nll
from posgen.harness.model_family import rotary_modules
from posgen.harness.model_side import door
from posgen.harness.model_side.perturbation import ModelPerturbation
from posgen.harness.position_family import position_family_of
from posgen.perturbations import parse
from posgen.perturbations.length import LengthPerturbation
from posgen.results.folder.config import ModelEntry
from posgen.results.folder.length_config import LengthConfig
from posgen.results.folder.store import atomic_write_json
from posgen.results.scores.length import read_records, result_path
from posgen.results.scores.length_decompose import decomposition_path
from posgen.results.scores.length_window import window_path


def _load_groups(schemes: list[LengthPerturbation]) -> dict[str, list[LengthPerturbation]]:
    """Schemes grouped by the model load they need (rope scalings load their own)."""
    groups: dict[str, list[LengthPerturbation]] = {}
    for s in schemes:
        key = "plain" if s.rope_type is None else s.to_string()
        groups.setdefault(key, []).append(s)
    return groups


def _missing(folder: Path, config: LengthConfig, scheme: str, doc: str) -> bool:
    """Whether (scheme, document) still lacks its record (or, with ``decompose``, its fit)."""
    if not result_path(folder, scheme, doc).exists():
        return True
    return config.decompose and not decomposition_path(folder, scheme, doc).exists()


def run_documents(
    folder: Path,
    config: LengthConfig,
    entry: ModelEntry,
    device: str | None,
    token_ids: dict[str, list[int]],
    log: Callable[[str], None],
    reuse: bool = True,
) -> None:
    """Compute every missing (scheme, document) file of the run folder; the model is
    loaded through :func:`posgen.harness.loading.load_model`, once per load group, and
    the decomposition (``config.decompose``) runs on that same model and ids; ``log``
    gets a line per (scheme, document) computed. With ``reuse`` (and no position
    scheme, on a rotary model) ``none`` and ``lambda`` continue one shared prefix per
    document (:mod:`.reuse`); otherwise each runs its own whole forward."""
    import torch

    positions = parse("position", config.positions) if config.positions else None
    groups = _load_groups(config.parsed_schemes())
    windows = [d for d in config.documents if _window_missing(folder, config, d)]
    if windows and "plain" not in groups:  # rope scalings only: the window needs the plain model
        groups = {"plain": [], **groups}
    for key, group in groups.items():
        todo = [
            (s, d)
            for s in group
            for d in config.documents
            if _missing(folder, config, s.to_string(), d)
        ]
        mine = windows if key == "plain" else []
        if not todo and not mine:
            continue
        loaded = loading.load_model(entry, device, length=group[0] if group else None)
        model = loaded.model
        for doc in mine:
            _score_window(folder, config, loaded, doc, token_ids[doc], log)
        if key == "plain" and positions is None and reuse and _rotary(model):
            _score_shared(folder, config, loaded, sharing(group), token_ids, log)
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


def _rotary(model) -> bool:
    """Whether the model's positions are rotary (Falcon-ALiBi has a rotary module its
    layers never apply: its family says ALiBi)."""
    return position_family_of(model).kind == "rotary" and bool(rotary_modules(model))


def _window_missing(folder: Path, config: LengthConfig, doc: str) -> bool:
    """Whether the run has an in-distribution window pass and ``doc`` still lacks it."""
    return config.window_stride is not None and not window_path(folder, doc).exists()


def _score_window(folder, config, loaded, doc: str, ids: list[int], log) -> None:
    """The in-distribution window pass of one document (plain model), to its record."""
    import torch

    model, c, stride = loaded.model, config.trained_context, config.window_stride
    input_ids = torch.tensor([ids], dtype=torch.long, device=model.device)
    start = time.perf_counter()
    nll = window_nll(model, input_ids, c, stride, config.chunk)
    seconds = time.perf_counter() - start
    sums, counts = bucket_sums(nll, config.bucket_width, config.n_buckets)
    record = {
        "document": doc,
        "n_tokens": len(ids),
        "trained_context": c,
        "window_stride": stride,
        "context": list(context_range(c, stride)),
        "nll_sum": sums.tolist(),
        "count": counts.tolist(),
        "seconds": seconds,
        "loaded": loaded.record,
    }
    atomic_write_json(window_path(folder, doc), record)
    log(f"{'window':>16}  {doc:<20} {len(ids) - c} tokens past C  {seconds:.1f} s")


def _score_document(folder, config, loaded, scheme, doc, input_ids, positions, log) -> None:
    """NLL and drift of one (scheme, document), written to its record."""
    model, width, n_buckets = loaded.model, config.bucket_width, config.n_buckets
    p = ModelPerturbation(positions=positions, seed=config.seed, length=scheme)
    start = time.perf_counter()
    with (
        door.forward(
            model, p, door.plan_forward(input_ids, p, model=model), block_size=config.block_size
        ),
        drift_capture(model, config.trained_context, width, n_buckets) as drift,
    ):
        nll = position_nll(model, input_ids, config.chunk)
    seconds = time.perf_counter() - start
    record = {"seconds": seconds, "seconds_cover": "whole"}
    _write_record(folder, config, loaded, scheme, doc, nll, drift[-1] if drift else None, record)
    log(f"{scheme.to_string():>16}  {doc:<20} {input_ids.shape[1]} tokens  {seconds:.1f} s")


def _score_shared(folder, config, loaded, schemes, token_ids, log) -> None:
    """Every missing (sharing scheme, document) record: per document one prefix [0, P)
    (:func:`.reuse.run_prefix`), then each scheme's suffix from its cache. Each record's
    ``seconds`` covers its suffix; ``prefix_seconds``, ``prefix_tokens`` and
    ``prefix_shared_by`` say what the prefix cost and which schemes shared it."""
    import torch

    p = shared_length(schemes, config.trained_context)
    for doc in config.documents:
        todo = [s for s in schemes if not result_path(folder, s.to_string(), doc).exists()]
        if not todo:
            continue
        ids = torch.tensor([token_ids[doc]], dtype=torch.long, device=loaded.model.device)
        names = [s.to_string() for s in todo]
        prefix = run_prefix(
            loaded.model, ids, min(p, ids.shape[1]), config.chunk, names, config.trained_context
        )
        log(f"{'prefix':>16}  {doc:<20} {prefix.tokens} tokens  {prefix.seconds:.1f} s")
        for scheme in todo:
            nll, drift, seconds = run_suffix(loaded.model, ids, prefix, scheme, config)
            record = {
                "seconds": seconds,
                "seconds_cover": f"suffix [{prefix.tokens}, {ids.shape[1]})",
                "prefix_tokens": prefix.tokens,
                "prefix_seconds": prefix.seconds,
                "prefix_shared_by": names,
            }
            _write_record(folder, config, loaded, scheme, doc, nll, drift, record)
            log(f"{scheme.to_string():>16}  {doc:<20} suffix from {prefix.tokens}  {seconds:.1f} s")
        del prefix


def _write_record(folder, config, loaded, scheme, doc, nll, drift, timing) -> None:
    """One (scheme, document) record: bucket NLL sums, drift sums, ``timing`` fields."""
    sums, counts = bucket_sums(nll, config.bucket_width, config.n_buckets)
    record = {
        "scheme": scheme.to_string(),
        "spec": scheme.spec.to_dict(),
        "document": doc,
        "n_tokens": int(nll.size),
        "nll_sum": sums.tolist(),
        "count": counts.tolist(),
        "drift": drift.to_dict() if drift is not None else None,
        **timing,
        "loaded": loaded.record,
    }
    atomic_write_json(result_path(folder, scheme.to_string(), doc), record)


def read_results(folder: Path, config: LengthConfig) -> list[dict[str, Any]]:
    """Every (scheme, document) record of the run, in config order; missing ones raise."""
    schemes = [s.to_string() for s in config.parsed_schemes()]
    return read_records(folder, schemes, list(config.documents))
