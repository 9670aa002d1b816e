"""``posgen layers --combine RUN [RUN ...]``: one report over finished layers folders.

Each folder's ``layers_scores.json`` (written by its own ``posgen layers`` run) is read
back as it is; nothing is recomputed and no model loads. The output folder gets
``layers.png`` (one panel per folder), ``layers.md`` (a section per folder, each with its
own relation test and verdict: the folders are not pooled) and ``layers_scores.json`` (the
profiles, in the order given), and ``combined.json`` naming its sources. A rerun into the
same output folder re-draws it; any other non-empty folder, or one of the inputs, is
refused.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from posgen.atomic import atomic_write_bytes, atomic_write_text
from posgen.harness.layers.folder import SETTINGS
from posgen.harness.layers.score import json_safe, read_scores
from posgen.harness.out_folder import check_out_folder
from posgen.results.folder.store import RunConflictError, atomic_write_json

MARK = "combined.json"
KIND = "posgen-layers-combined"


class CombineError(ValueError):
    """Bad ``--combine`` input: the message says what to do."""


def read_profiles(runs: list[Path]) -> list[dict[str, Any]]:
    """The profile of every folder, labelled so no two panels share a title."""
    resolved = [Path(r).resolve() for r in runs]
    if len(set(resolved)) != len(resolved):
        raise CombineError("--combine: a folder is named twice")
    profiles = []
    for run in runs:
        if not (Path(run) / SETTINGS).is_file():
            raise CombineError(f"--combine {run}: not a posgen layers folder (no {SETTINGS})")
        path = Path(run) / "layers_scores.json"
        if not path.is_file():
            raise CombineError(
                f"--combine {run}: no layers_scores.json; finish that run first "
                "(rerun its posgen layers command: it resumes)"
            )
        profiles.append(read_scores(path))
    titles = [(p["model"], p["scheme"]) for p in profiles]
    for prof, run, title in zip(profiles, runs, titles, strict=True):
        if titles.count(title) > 1:  # same model and scheme: tell the panels apart
            prof["model"] = f"{prof['model']} ({Path(run).name})"
    return profiles


def check_out(
    out: Path, runs: list[Path], mark: str = MARK, what: str = "combined layers report"
) -> None:
    """Refuse an output folder that is an input or holds anything but a combined report
    (``what``, marked by its file ``mark``)."""
    if out.resolve() in {Path(r).resolve() for r in runs}:
        raise CombineError(f"--out {out} is one of the --combine folders; choose another --out")
    check_out_folder(out)  # not a file, and writable
    foreign = out.is_dir() and not (out / mark).is_file()
    if foreign and any(not p.name.startswith(".") for p in out.iterdir()):
        raise RunConflictError(
            f"{out} exists, is not empty and is not a {what}; choose another --out"
        )


def combine(runs: list[Path], out: Path) -> dict[str, Path]:
    from posgen.results.report.layers import profile_figure, render_markdown

    check_out(out, runs)
    profiles = read_profiles(runs)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "png": out / "layers.png",
        "md": out / "layers.md",
        "scores": out / "layers_scores.json",
        "mark": out / MARK,
    }
    atomic_write_bytes(paths["png"], profile_figure(profiles))
    atomic_write_text(paths["md"], render_markdown(profiles))
    atomic_write_json(paths["scores"], {"profiles": json_safe(profiles)})
    atomic_write_json(
        paths["mark"], {"kind": KIND, "sources": [str(Path(r).resolve()) for r in runs]}
    )
    return paths
