"""``posgen layers --combine`` and ``posgen cause --combine``: one report over finished
folders of the command.

``posgen layers --combine RUN [RUN ...]``: one report over finished layers folders.

Each folder's ``layers_scores.json`` (written by its own ``posgen layers`` run) is read
back as it is; nothing is recomputed and no model loads. The output folder gets
``layers.png`` (one panel per folder), ``layers.md`` (a section per folder, each with its
own relation test and verdict: the folders are not pooled) and ``layers_scores.json`` (the
profiles, in the order given), and ``combined.json`` naming its sources. A rerun into the
same output folder re-draws it; any other non-empty folder, or one of the inputs, is
refused.

``posgen cause --combine RUN [RUN ...]``: one report over finished cause folders.

Each folder's ``cause_scores.json`` is read back as written by its own run; nothing is
recomputed and no model loads. The output folder gets ``cause.png`` (a row of panels per
folder), ``cause.md`` (a section per folder with its own answer, then the cross-model
correlations of the predicted change and the prediction's share against the all-layer
sensitivity of each folder's ``--layers-run``: descriptive only at n ≤ 4 models,
random-init twins listed and not counted), ``cause_scores.json`` and ``combined.json``
naming its sources. Refusals as ``posgen layers --combine``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posgen.atomic import atomic_write_bytes, atomic_write_text
from posgen.results.folder.cause_config import CauseFolder
from posgen.results.folder.folder_kind import folder_refusal
from posgen.results.folder.layers_config import LayersFolder
from posgen.results.folder.protocol import CommandFolder, check_writable
from posgen.results.folder.store import RunConflictError, atomic_write_json
from posgen.results.report.cause import cross_model_section
from posgen.results.report.cause import render_markdown as cause_markdown
from posgen.results.report.cause_figure import cause_figure
from posgen.results.report.layers import profile_figure, render_markdown
from posgen.results.scores.cause import cross_model_rows
from posgen.results.scores.layers_profile import json_safe, read_scores

MARK = "combined.json"
KIND = "posgen-layers-combined"
CAUSE_KIND = "posgen-cause-combined"


class CombineError(ValueError):
    """Bad ``--combine`` input: the message says what to do."""


def read_layers_profiles(runs: list[Path]) -> list[dict[str, Any]]:
    """The profile of every folder, labelled so no two panels share a title."""
    profiles = read_finished(runs, LayersFolder, "layers_scores.json")
    titles = [(p["model"], p["scheme"]) for p in profiles]
    for prof, run, title in zip(profiles, runs, titles, strict=True):
        if titles.count(title) > 1:  # same model and scheme: tell the panels apart
            prof["model"] = f"{prof['model']} ({Path(run).name})"
    return profiles


def read_finished(runs: list[Path], folder: type[CommandFolder], scores: str) -> list[dict]:
    """The ``scores`` file of every folder of ``folder``'s command (told from its settings
    file: another is named), in the order given; each folder once, and finished."""
    command = f"posgen {folder.command}"
    resolved = [Path(r).resolve() for r in runs]
    if len(set(resolved)) != len(resolved):
        raise CombineError("--combine: a folder is named twice")
    found = []
    for run in runs:
        refusal = folder_refusal(run, folder.command)
        if refusal is not None:
            raise CombineError(f"--combine {refusal}")
        path = Path(run) / scores
        if not path.is_file():
            raise CombineError(
                f"--combine {run}: no {scores}; finish that run first "
                f"(rerun its {command} command: it resumes)"
            )
        found.append(read_scores(path))
    return found


def write_combined(
    out: Path, runs: list[Path], stem: str, kind: str, png: bytes, md: str, scores: dict
) -> dict[str, Path]:
    """The combined report's four files in ``out`` (``<stem>.png``, ``<stem>.md``,
    ``<stem>_scores.json`` and the mark naming the sources), each written atomically."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "png": out / f"{stem}.png",
        "md": out / f"{stem}.md",
        "scores": out / f"{stem}_scores.json",
        "mark": out / MARK,
    }
    atomic_write_bytes(paths["png"], png)
    atomic_write_text(paths["md"], md)
    atomic_write_json(paths["scores"], json_safe(scores))
    atomic_write_json(
        paths["mark"], {"kind": kind, "sources": [str(Path(r).resolve()) for r in runs]}
    )
    return paths


def check_out(
    out: Path, runs: list[Path], mark: str = MARK, what: str = "combined layers report"
) -> None:
    """Refuse an output folder that is an input or holds anything but a combined report
    (``what``, marked by its file ``mark``)."""
    if out.resolve() in {Path(r).resolve() for r in runs}:
        raise CombineError(f"--out {out} is one of the --combine folders; choose another --out")
    check_writable(out)  # not a file, and writable
    foreign = out.is_dir() and not (out / mark).is_file()
    if foreign and any(not p.name.startswith(".") for p in out.iterdir()):
        raise RunConflictError(
            f"{out} exists, is not empty and is not a {what}; choose another --out"
        )


def combine_layers(runs: list[Path], out: Path) -> dict[str, Path]:
    """``posgen layers --combine``."""
    check_out(out, runs)
    profiles = read_layers_profiles(runs)
    return write_combined(
        out,
        runs,
        "layers",
        KIND,
        profile_figure(profiles),
        render_markdown(profiles),
        {"profiles": profiles},
    )


def read_cause_profiles(runs: list[Path]) -> list[dict[str, Any]]:
    """The profile of every folder, in the order given."""
    profiles = read_finished(runs, CauseFolder, "cause_scores.json")
    for prof in profiles:  # JSON null reads back as NaN: no layers run is None
        prof["layers_run"] = prof["layers_run"] if isinstance(prof["layers_run"], dict) else None
    return profiles


def combine_cause(runs: list[Path], out: Path) -> dict[str, Path]:
    """``posgen cause --combine``."""
    check_out(out, runs, MARK, "combined cause report")
    profiles = read_cause_profiles(runs)
    cross = cross_model_rows(profiles)
    md = cause_markdown(profiles, cross=cross_model_section(cross))
    scores = {"profiles": profiles, "cross_model": cross}
    return write_combined(out, runs, "cause", CAUSE_KIND, cause_figure(profiles), md, scores)
