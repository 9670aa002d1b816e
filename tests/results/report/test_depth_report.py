"""The evidence-depth figure and report blocks, on synthetic per-document depth cells."""

from __future__ import annotations

import pandas as pd
from tests.depth_documents import DEPTHS, acc_rows, nll_rows, perdoc, u_shape

from posgen.results.report.depth import NO_CELLS, depth_blocks, depth_figure, draw
from posgen.results.report.figure_record import problems, read_record
from posgen.results.scores.depth import depth_documents, depth_scores


def _figure(blocks):
    (img,) = [b for b in blocks if b[0] == "img"]
    return read_record(img[2])


def test_one_panel_per_task_with_both_forms_their_intervals_and_the_gaps_written():
    rows = nll_rows({"text": u_shape(1.5), "position": u_shape(0.0)}, n=24)
    rows += acc_rows({"text": dict.fromkeys(DEPTHS, 0.8), "position": dict.fromkeys(DEPTHS, 0.8)})
    blocks, line = depth_blocks(perdoc(rows))
    rec = _figure(blocks)
    assert problems(rec) == [] and line == "Evidence depth: 1 figure(s)."
    assert [a["title"] for a in rec["axes"]] == ["kv_mc: acc", "posgen_kv: perplexity"]
    for ax in rec["axes"]:
        assert ax["xticks"] == ["0", "0.25", "0.5", "0.75", "1"]  # the depths run
        assert ax["xlim"][0] < 0 and ax["xlim"][1] > 1
        assert "evidence depth D applied" in ax["xlabel"] and "paired 95 % CI" in ax["ylabel"]
        assert ax["points"] == 10 and ax["intervals"] == 10  # 2 forms × 5 depths, with bars
    sentences = [b[1] for b in blocks if b[0] == "p" and b[1].startswith("m / ")]
    assert any("posgen_kv / perplexity: The depth curve comes from reading order" in s
               for s in sentences)  # fmt: skip
    assert any("kv_mc / acc: Where the depth curve comes from cannot be told" in s
               for s in sentences)  # fmt: skip


def test_the_gap_with_its_interval_is_written_in_the_panel():
    docs = depth_documents(perdoc(nll_rows({"text": u_shape(1.5)}, n=12)))
    scores = depth_scores(docs)
    (g,) = scores["gaps"]
    fig = draw(scores["curves"], scores["gaps"], "m", {"posgen_kv": "perplexity"})
    written = "\n".join(t.get_text() for t in fig.axes[0].texts)
    assert f"gap, text: {g['value']:+.3g} [{g['ci_lo']:+.3g}, {g['ci_hi']:+.3g}]" in written
    assert g["ci_lo"] > 0  # a planted gap of 1.5 nats
    png = depth_figure(scores["curves"], scores["gaps"], "m", {"posgen_kv": "perplexity"})
    assert problems(read_record(png)) == []
    assert depth_figure(scores["curves"], scores["gaps"], "other", {"posgen_kv": "x"}) is None


def test_without_depth_cells_there_is_no_block_and_one_line_says_why():
    rows = nll_rows({"text": u_shape(1.0)}, n=4)
    swap = pd.DataFrame([dict(r, scheme="swap", rate=0.05) for r in rows])
    assert depth_blocks(swap) == ([], NO_CELLS)


def test_depths_without_both_ends_draw_nothing_and_say_so():
    rows = nll_rows({"text": {0.25: 0.0, 0.5: 1.0}}, n=6)
    blocks, line = depth_blocks(perdoc(rows))
    assert blocks == [] and "depths 0 and 1" in line


def test_depth_cells_in_the_examples_are_titled_by_where_the_evidence_sits():
    from posgen.results.report.examples import examples_section

    def cell(kind, scheme, rate):
        c = {"task": "posgen_kv", "kind": kind, "scheme": scheme, "rate": rate}
        return {"model": "m", "cell": c, "examples": {"docs": {}, "rows": []}}

    cells = [cell("none", "none", 0.0), cell("position", "depth", 0.5), cell("text", "swap", 0.05)]
    blocks = examples_section(["m"], iter(cells))
    text = [b[-1] for b in blocks]
    assert "Examples: what a rate or an evidence depth does on this suite" in text
    assert "position form, evidence at depth 0.5: no example recorded." in text
    assert "text swap at 0.05: no example recorded." in text
    plain = examples_section(["m"], [cells[0], cells[2]])
    assert plain[0] == ("h", 2, "Examples: what a rate does on this suite")
