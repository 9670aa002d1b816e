"""``posgen cause --combine RUN [RUN ...]``: one report over finished cause folders.

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
from posgen.harness.cause.folder import CauseFolder
from posgen.harness.layers.combine import CombineError, check_out
from posgen.harness.layers.score import json_safe, read_scores
from posgen.results.folder.store import atomic_write_json

MARK = "combined.json"
KIND = "posgen-cause-combined"


def read_profiles(runs: list[Path]) -> list[dict[str, Any]]:
    """The profile of every folder, in the order given."""
    resolved = [Path(r).resolve() for r in runs]
    if len(set(resolved)) != len(resolved):
        raise CombineError("--combine: a folder is named twice")
    profiles = []
    for run in runs:
        if not (Path(run) / CauseFolder.settings).is_file():
            raise CombineError(
                f"--combine {run}: not a posgen cause folder (no {CauseFolder.settings})"
            )
        path = Path(run) / "cause_scores.json"
        if not path.is_file():
            raise CombineError(
                f"--combine {run}: no cause_scores.json; finish that run first "
                "(rerun its posgen cause command: it resumes)"
            )
        prof = read_scores(path)  # JSON null reads back as NaN: no layers run is None
        prof["layers_run"] = prof["layers_run"] if isinstance(prof["layers_run"], dict) else None
        profiles.append(prof)
    return profiles


def combine(runs: list[Path], out: Path) -> dict[str, Path]:
    from posgen.results.report.cause import cause_figure, cross_model_section, render_markdown
    from posgen.results.scores.cause import cross_model_rows

    check_out(out, runs, MARK, "combined cause report")
    profiles = read_profiles(runs)
    cross = cross_model_rows(profiles)
    out.mkdir(parents=True, exist_ok=True)
    paths = {
        "png": out / "cause.png",
        "md": out / "cause.md",
        "scores": out / "cause_scores.json",
        "mark": out / MARK,
    }
    atomic_write_bytes(paths["png"], cause_figure(profiles))
    atomic_write_text(paths["md"], render_markdown(profiles, cross=cross_model_section(cross)))
    atomic_write_json(
        paths["scores"], {"profiles": json_safe(profiles), "cross_model": json_safe(cross)}
    )
    atomic_write_json(
        paths["mark"], {"kind": KIND, "sources": [str(Path(r).resolve()) for r in runs]}
    )
    return paths
