"""Every command's scores and report, re-made from its folder alone: :func:`regenerate`.

A command's ``main`` reads: resolve the settings, create the folder
(:mod:`posgen.results.folder.protocol`), run what is missing, then ``regenerate`` the
folder. ``regenerate`` tells the command from the folder's settings file and writes that
command's tables, scores, figures and report, each file atomically; nothing loads a
model, so a rerun, ``posgen report`` or a newer posgen can re-draw any finished folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posgen.atomic import atomic_write, atomic_write_bytes, atomic_write_text
from posgen.perturbations.length import parse_length
from posgen.results.folder.cause_config import CauseFolder
from posgen.results.folder.decompose_config import DecomposeFolder
from posgen.results.folder.folder_kind import not_posgen, tell_folder
from posgen.results.folder.layers_config import LayersFolder
from posgen.results.folder.length_config import LengthFolder
from posgen.results.folder.run_store import RunStore
from posgen.results.folder.schema import SchemaError
from posgen.results.folder.store import atomic_write_json
from posgen.results.report.build import regenerate as regenerate_run
from posgen.results.report.cause import render_markdown as cause_markdown
from posgen.results.report.cause_figure import cause_figure
from posgen.results.report.decomposition_plots import HeadMap, write_plots
from posgen.results.report.layers import profile_figure, render_markdown
from posgen.results.report.length import curves_png
from posgen.results.report.length import markdown as length_markdown
from posgen.results.report.length_decompose import decomposition_png
from posgen.results.scores.cause_profile import build_profile as cause_profile
from posgen.results.scores.layers_profile import build_profile as layers_profile
from posgen.results.scores.layers_profile import json_safe
from posgen.results.scores.length import json_ready, read_records
from posgen.results.scores.length_decompose import decomposition_scores, read_decompositions
from posgen.results.scores.length_window import read_windows, score_with_window
from posgen.results.tables.decomposition import (
    MEANINGS,
    layer_means,
    past_context_table,
    summarize,
    write_outputs,
)


def _write_csv(path: Path, rows: list[dict[str, Any]]) -> None:
    import pandas as pd

    table = pd.DataFrame(rows)
    atomic_write(path, lambda p: table.to_csv(p, index=False))


def _files(root: Path, stem: str, **tables: str) -> dict[str, Path]:
    """The report's files in ``root``: ``tables`` by name, then ``<stem>_scores.json``,
    ``<stem>.png`` and ``<stem>.md``."""
    names = {**tables, "scores": f"{stem}_scores.json", "png": f"{stem}.png", "md": f"{stem}.md"}
    return {key: root / name for key, name in names.items()}


def regenerate_layers(folder: LayersFolder) -> dict[str, Path]:
    """layer_profile.csv, layer_relation.csv, layers_scores.json, layers.png, layers.md
    (related to the folder's remembered ``--length-run``, if any)."""
    prof = layers_profile(folder, folder.length_run())
    paths = _files(
        folder.root, "layers", profile="layer_profile.csv", relation="layer_relation.csv"
    )
    _write_csv(paths["profile"], [*prof["layers"], {**prof["all"], "layer": "all"}])
    _write_csv(paths["relation"], prof["relation"])
    atomic_write_json(paths["scores"], json_safe(prof))
    atomic_write_bytes(paths["png"], profile_figure([prof]))
    atomic_write_text(paths["md"], render_markdown([prof]))
    return paths


def regenerate_cause(folder: CauseFolder) -> dict[str, Path]:
    """cause_nll.csv, cause_prediction.csv, cause_relation.csv (with a layers run),
    cause_scores.json, cause.png, cause.md (related to the remembered ``--layers-run``)."""
    prof = cause_profile(folder, folder.layers_run())
    root = folder.root
    paths = _files(root, "cause", nll="cause_nll.csv", prediction="cause_prediction.csv")
    _write_csv(paths["nll"], prof["nll"])
    _write_csv(paths["prediction"], [*prof["prediction_layers"], *prof["prediction"]])
    if prof["relation"]:
        paths["relation"] = root / "cause_relation.csv"
        _write_csv(paths["relation"], prof["relation"])
    atomic_write_json(paths["scores"], json_safe(prof))
    atomic_write_bytes(paths["png"], cause_figure([prof]))
    atomic_write_text(paths["md"], cause_markdown([prof]))
    return paths


def regenerate_length(folder: LengthFolder) -> dict[str, Path]:
    """length_scores.json, length_curves.png, length.md, and with ``decompose``
    length_decomposition.png; every (scheme, document) record must be there."""
    config, root = folder.config, folder.root
    documents = list(config.documents)
    records = read_records(root, [s.to_string() for s in config.parsed_schemes()], documents)
    windows = read_windows(root, documents) if config.window_stride else None
    scores = score_with_window(records, config, windows)
    paths = {**_files(root, "length"), "png": root / "length_curves.png"}
    if config.decompose:
        fits = read_decompositions(root, list(config.schemes), documents)
        scores["decomposition"] = decomposition_scores(fits, scores["drift"])
        paths["decomposition_png"] = root / "length_decomposition.png"
        atomic_write_bytes(paths["decomposition_png"], decomposition_png(scores))
    atomic_write_json(paths["scores"], json_ready(scores))
    atomic_write_bytes(paths["png"], curves_png(scores))
    atomic_write_text(paths["md"], length_markdown(scores))
    return paths


def _decompose_table(folder: DecomposeFolder):
    import pandas as pd

    return pd.concat([folder.read_table(c) for c in folder.config.cells()], ignore_index=True)


def regenerate_decompose(folder: DecomposeFolder) -> dict[str, Path]:
    """heads.parquet, summary.csv/.parquet, layers.csv, heatmap_r_*.png and head_map.png
    from the folder's fits and head map."""
    table = _decompose_table(folder)
    write_outputs(folder.root, table, summarize(table), layer_means(table))
    head = folder.read_head_map()
    plots = write_plots(folder.root, table, None if head is None else HeadMap(*head))
    names = {"heads": "heads.parquet", "summary": "summary.csv", "layers": "layers.csv"}
    return {**{key: folder.root / name for key, name in names.items()}, "plots": plots}


def decompose_text(folder: DecomposeFolder) -> str:
    """What ``posgen decompose`` prints: the summary, what a[i−j] means for each family,
    what a Λ scheme fitted, the per-layer figures before and past C."""
    import pandas as pd

    table, cfg = _decompose_table(folder), folder.config
    summary = summarize(table)
    lines = []
    with pd.option_context("display.width", 200, "display.max_columns", 40):
        lines.append(
            summary.drop(columns=["distance_term"], errors="ignore").T.to_string(header=False)
        )
        for family in dict.fromkeys(summary.get("position_family", [])):
            lines.append(f"a[i−j] of {family} positions: {MEANINGS[family]}")
        if cfg.length is not None and parse_length(cfg.length).uses_attention:  # Λ: the fit
            masks = ", ".join(sorted(table["fit_mask"].unique()))
            lines.append(f"fitted under {cfg.length}: {masks} (Lambda's global keys not fitted)")
        if cfg.trained_context is not None:
            lines.append(
                f"per layer, trained context C = {cfg.trained_context} (past C: query rows i >= C):"
            )
            per_layer = past_context_table(layer_means(table))
            lines.append(per_layer.to_string(index=False, float_format="%.4f"))
    return "\n".join(lines)


# each command's folder class, by the command its settings file names
FOLDERS = {
    "run": RunStore,
    "length": LengthFolder,
    "decompose": DecomposeFolder,
    "layers": LayersFolder,
    "cause": CauseFolder,
}


def open_folder(root: Path | str):
    """The folder at ``root`` as its command's folder class, told from its settings file
    (:func:`~posgen.results.folder.folder_kind.tell_folder`: a run folder and a length
    folder both keep a ``config.json``, told apart by its fields). A folder of no command
    (none of the settings files, or one that is not posgen's) is a :class:`SchemaError`
    saying what it is."""
    found = tell_folder(root)
    if found is None or found.command is None:
        raise SchemaError(not_posgen(root, "posgen report"))
    return FOLDERS[found.command].open(root)


def regenerate(root: Path | str) -> dict[str, Path]:
    """Every derived file of the posgen folder at ``root``, re-made from the folder alone
    (whichever command wrote it); returns their paths (``md`` among them)."""
    return regenerate_folder(open_folder(root))


def regenerate_folder(folder) -> dict[str, Path]:
    """:func:`regenerate` of a folder already opened (:func:`open_folder`)."""
    if isinstance(folder, RunStore):
        return regenerate_run(folder.root)
    writer = {
        CauseFolder: regenerate_cause,
        LayersFolder: regenerate_layers,
        DecomposeFolder: regenerate_decompose,
        LengthFolder: regenerate_length,
    }[type(folder)]
    return writer(folder)
