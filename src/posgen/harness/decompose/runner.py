"""``posgen decompose``'s work: each fit table, the median head's map and the experiments,
into a resumable folder (:class:`~posgen.results.folder.decompose_config.DecomposeFolder`).

A cell already in the folder is kept; only what is missing is computed. The tables and
plots are then re-made from the folder
(:func:`posgen.results.report.folder_reports.regenerate_decompose`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import replace
from typing import Any

from posgen.harness.decomposition.experiments import write_experiments
from posgen.harness.decomposition.pipeline import (
    decompose_model,
    load_model,
    median_head_map,
)
from posgen.harness.loading import random_init_twin
from posgen.harness.model_side import door
from posgen.harness.model_side.perturbation import ModelPerturbation
from posgen.perturbations.length import parse_length
from posgen.results.folder.decompose_config import DecomposeConfig, DecomposeFolder
from posgen.results.folder.store import atomic_write_json


def length_scheme(config: DecomposeConfig):
    """The config's length scheme, parsed (None: the model as trained)."""
    return None if config.length is None else parse_length(config.length)


def forward_context(length) -> Callable[..., Any] | None:
    """``posgen length``'s forward for ``length`` (through the door) as a
    ``forward_context(model, ids)``."""
    if length is None:
        return None
    p = ModelPerturbation(length=length)

    def forward(model, ids: list[int]):
        import torch

        inps = torch.tensor([ids])
        return door.forward(model, p, door.plan_forward(inps, p, model=model))

    return forward


def run(folder: DecomposeFolder, device: str, log: Callable[[str], None]) -> None:
    """Every missing cell of ``folder``: the fits, the head map, the experiments."""
    cfg, length = folder.config, length_scheme(folder.config)
    kw = dict(docs=cfg.docs, tokens=cfg.tokens, seed=cfg.seed, device=device)
    kw.update(length=length, context=cfg.trained_context, forward_context=forward_context(length))
    for cell in cfg.cells():
        if folder.has_cell(cell):
            log(f"{cell}: kept from an earlier run")
            continue
        twin = cell == "random_init"  # the twin keeps the trained model's label
        entry = replace(cfg.model, random_init=True) if twin else cfg.model
        folder.write_table(cell, decompose_model(entry, random_init=twin, **kw))
    if not folder.has_cell("head_map"):
        table = folder.read_table("trained")
        head = median_head_map(
            table,
            model=cfg.model,
            device=device,
            length=length,
            forward_context=kw["forward_context"],
        )
        folder.write_head_map(*(head if head is not None else (None, None, "")))
    if cfg.experiments and not folder.has_cell("experiments"):
        _experiments(folder, device)


def _experiments(folder: DecomposeFolder, device: str) -> None:
    """Controlled distance and the q/k pattern (and on the twin), their summaries kept."""
    cfg = folder.config
    model, tokenizer = load_model(cfg.model, device=device)
    twin = None
    if cfg.random_init:
        twin = random_init_twin(model.config, seed=cfg.seed, name=cfg.model.path).to(device)
    summaries = write_experiments(
        folder.root,
        model,
        tokenizer,
        tokens=cfg.tokens,
        docs=min(cfg.docs, 2),
        label=cfg.model.label,
        twin=twin,
    )
    records = {name: frame.to_dict(orient="records") for name, frame in summaries.items()}
    atomic_write_json(folder.cell_path("experiments"), records)
