"""The excess over the in-distribution window on planted records: a planted NLL shift
past C moves the new effective length, a hard passage (harder for the window too) does
not, while it does move the old figure (each bucket vs the mean over [C/2, C))."""

from __future__ import annotations

import numpy as np
import pytest

from posgen.results.folder.length_config import LengthConfig
from posgen.results.scores.length import gather, score_length, t_interval
from posgen.results.scores.length_window import (
    bucket_excess,
    document_window_excess,
    score_with_window,
)

C, W, B, N = 64, 16, 8, 16  # trained context, bucket width, buckets, tokens per bucket
DOCS = ("a", "b", "c", "d", "e", "f")
CONFIG = LengthConfig(
    model="m",
    trained_context=C,
    max_length=B * W,
    bucket_width=W,
    threshold=0.10,
    seed=1,
    schemes=("planted", "hard"),
    documents=DOCS,
    window_stride=C // 2,
)


def _hardness(seed: int) -> np.ndarray:
    """Per document and bucket, how hard the text is (shared by scheme and window)."""
    rng = np.random.default_rng(seed)
    return 2.0 + rng.normal(0, 0.02, (len(DOCS), B))


def _records(scheme: str, means: np.ndarray) -> list[dict]:
    return [
        {"scheme": scheme, "document": d, "nll_sum": list(m * N), "count": [N] * B, "drift": None}
        for d, m in zip(DOCS, means, strict=True)
    ]


def _windows(means: np.ndarray) -> list[dict]:
    counts = [0] * (C // W) + [N] * (B - C // W)  # the window scores tokens past C only
    return [
        {
            "document": d,
            "nll_sum": list(np.where(np.array(counts) > 0, m * N, 0.0)),
            "count": counts,
        }
        for d, m in zip(DOCS, means, strict=True)
    ]


def test_a_planted_shift_moves_the_new_figure_a_hard_passage_does_not():
    h = _hardness(0)
    h_hard = h.copy()
    h_hard[:, 5:] += 0.5  # text from 80 on is harder for every scheme and the window
    shift = np.zeros(B)
    shift[6:] = 0.3  # the scheme fails from 96 on: +0.3 nats over the window
    context_gain = 0.01  # the scheme sees more context than the window: slightly easier
    records = _records("planted", h + shift - context_gain)
    records += _records("hard", h_hard - context_gain)
    # one window record per document: the "hard" run has harder text, so score it apart
    planted = score_with_window(records[: len(DOCS)], CONFIG, _windows(h))
    hard = score_with_window(records[len(DOCS) :], CONFIG, _windows(h_hard))
    assert planted["effective_window"]["planted"]["effective_length"] == 96
    assert planted["effective"]["planted"]["effective_length"] == 96  # both see a real shift
    assert hard["effective"]["hard"]["effective_length"] == 80  # the old figure is fooled
    assert hard["effective_window"]["hard"]["censored"]  # the new one is not
    assert hard["effective_window"]["hard"]["effective_length"] == B * W
    rows = {r["bucket"]: r for r in planted["excess"]}
    assert sorted(rows) == list(range(C // W, B))  # buckets past C only
    assert rows[7]["excess"] == pytest.approx(0.3 - context_gain)
    assert rows[7]["ci_low"] < rows[7]["excess"] < rows[7]["ci_high"]
    assert rows[4]["excess"] == pytest.approx(-context_gain)


def test_document_excess_is_the_token_weighted_difference_past_c():
    h = _hardness(1)
    data = gather(_records("s", h + 0.2))["s"]
    w = _windows(h)
    window = (np.array([r["nll_sum"] for r in w]), np.array([r["count"] for r in w], float))
    excess, weight = document_window_excess(data, window, W, C)
    np.testing.assert_allclose(excess, 0.2)
    assert (weight == N * (B - C // W)).all()
    shifted = (window[0], window[1] + 1)  # the window counted other tokens: refused
    with pytest.raises(ValueError, match="same tokens"):
        bucket_excess(data, shifted, W, C)


def test_the_interval_covers_the_planted_excess_at_our_sizes():
    """t interval over D documents of e_db (normal per-document effects), D = 2 and 5."""
    rng = np.random.default_rng(7)
    for d in (2, 5):
        hits, reps = 0, 1000
        for _ in range(reps):
            e = rng.normal(0.1, 0.05, d)
            _, lo, hi = t_interval(e)
            hits += lo <= 0.1 <= hi
        assert abs(hits / reps - 0.95) < 0.025


def test_a_run_from_before_the_window_pass_scores_and_reports_as_before():
    from dataclasses import replace

    from posgen.results.report.length import effective_table, markdown

    old = replace(CONFIG, window_stride=None)
    assert "window_stride" not in old.to_dict()  # so its hash and folder name hold
    assert CONFIG.to_dict()["window_stride"] == C // 2
    scores = score_length(_records("planted", _hardness(2)), old)
    assert "effective_window" not in scores and "excess" not in scores
    header, _ = effective_table(scores)
    assert header[-2:] == ["effective length vs [C/2, C)", "95% interval"]
    assert "in-distribution window" not in markdown(scores)
    new = score_with_window(_records("planted", _hardness(2)), CONFIG, _windows(_hardness(2)))
    assert effective_table(new)[0][-2] == "effective length vs window"
    assert "Excess over the in-distribution window" in markdown(new)


def test_a_folder_from_before_the_window_pass_resumes_adding_it(tmp_path):
    from dataclasses import replace

    from posgen.results.folder.length_config import LengthFolder, read_length_config
    from posgen.results.folder.store import RunConflictError

    old = replace(CONFIG, window_stride=None)
    assert old.default_folder() == CONFIG.default_folder()  # the same folder by default
    LengthFolder.start(tmp_path, old)
    LengthFolder.start(tmp_path, CONFIG)  # resumes there and records the stride
    assert read_length_config(tmp_path).window_stride == C // 2
    with pytest.raises(RunConflictError, match="window_stride"):
        LengthFolder.start(tmp_path, replace(CONFIG, window_stride=C // 4))
    with pytest.raises(RunConflictError, match="threshold"):
        LengthFolder.start(tmp_path, replace(CONFIG, threshold=0.2))


def test_compare_shows_both_effective_lengths_and_a_dash_for_a_run_without_the_window(
    tmp_path,
):
    """``posgen compare`` pairs the new figure as it pairs the old one: a run made before
    the window pass shows "–" on the window line, and the line reads the tables."""
    import json

    from posgen.results.report.length import compare_lines
    from posgen.results.tables.length import length_tables

    h = _hardness(0)
    h_hard = h.copy()
    h_hard[:, 5:] += 0.5  # hard text from 80 on: the old figure fires, the new one does not
    records = _records("planted", h_hard - 0.01)
    with_window = score_with_window(records, CONFIG, _windows(h_hard))
    before = score_with_window(records, CONFIG, None)
    for run, scores in (("A", with_window), ("B", before)):
        folder = tmp_path / run / "length" / "m"
        folder.mkdir(parents=True)
        (folder / "length_scores.json").write_text(json.dumps(scores))
        for name, table in length_tables(tmp_path / run).items():
            table.to_parquet(tmp_path / run / f"{name}.parquet", index=False)
    lines = compare_lines(tmp_path / "A", tmp_path / "B")
    assert lines[1].endswith("and vs the in-distribution window:")
    old, new = lines[-2].split(), lines[-1].split()
    assert old[:4] == ["m", "planted", "A", "80"] and old[6:8] == ["B", "80"]
    assert new[:4] == ["vs", "window", "A", "≥128"] and new[-2:] == ["B", "–"]
    same = compare_lines(tmp_path / "B", tmp_path / "B")
    assert not any("window" in line for line in same)  # neither run has the pass
