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

from posgen.harness.cause.folder import CauseFolder
from posgen.harness.layers.combine import MARK, check_out, read_finished, write_combined

KIND = "posgen-cause-combined"


def read_profiles(runs: list[Path]) -> list[dict[str, Any]]:
    """The profile of every folder, in the order given."""
    profiles = read_finished(runs, CauseFolder.settings, "cause_scores.json", "posgen cause")
    for prof in profiles:  # JSON null reads back as NaN: no layers run is None
        prof["layers_run"] = prof["layers_run"] if isinstance(prof["layers_run"], dict) else None
    return profiles


def combine(runs: list[Path], out: Path) -> dict[str, Path]:
    from posgen.results.report.cause import cause_figure, cross_model_section, render_markdown
    from posgen.results.scores.cause import cross_model_rows

    check_out(out, runs, MARK, "combined cause report")
    profiles = read_profiles(runs)
    cross = cross_model_rows(profiles)
    md = render_markdown(profiles, cross=cross_model_section(cross))
    scores = {"profiles": profiles, "cross_model": cross}
    return write_combined(out, runs, "cause", KIND, cause_figure(profiles), md, scores)
