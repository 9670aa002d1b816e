"""Run the cells and the prediction of ``posgen cause`` on one loaded model.

Cells, each the posgen_prose documents scored by the model's own ``loglikelihood_rolling``
(lm-eval's rolling windows, as ``posgen layers`` scores them,
:func:`posgen.harness.loaded_model.prose_cells.score_cells`):

- ``plain``: the model as it is;
- ``<form>-all``: ``hf-posgen logits=<form>`` in every layer, for each per-layer form and
  each control (``foreign``: the distance term of the probe text's fit; ``shuffled``);
- ``<form>-layer-NNN``: ``logits=<form>, layers=NNN``, one layer at a time.

The plain cell keeps every layer's output (prefix reuse, as in ``posgen layers``), so a
one-layer cell runs from its layer on. Then the prediction: on the same documents' rolling
windows (the rows lm-eval scores, so the position draws are the cells' own, keyed on each
window's tokens) one captured forward per window and scheme
(:func:`posgen.harness.decomposition.predicted_change.predict_windows`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Callable
from typing import Any

from posgen.harness.decomposition.alibi_change import alibi_window_rows
from posgen.harness.decomposition.predicted_change import (
    distance_terms,
    predict_windows,
    rotary_window_rows,
)
from posgen.harness.decomposition.probe import probe_token_windows
from posgen.harness.loaded_model.model import load_entry_lm
from posgen.harness.loaded_model.prose_cells import prose_documents, score_cells
from posgen.harness.model_side.logits.forms import LogitDonor
from posgen.harness.model_side.prefix_reuse import PrefixReuse
from posgen.harness.position_family import position_family_of
from posgen.perturbations.base import registry
from posgen.results.folder.cause_config import CauseFolder
from posgen.results.folder.store import atomic_write_parquet


def rolling_windows(lm: Any, text: str) -> list[list[int]]:
    """The rows HFLM's ``loglikelihood_rolling`` runs for ``text``: each disjoint window
    ``(context + continuation)[-(max_length + 1):][:-1]`` (lm-eval's own window code)."""
    from lm_eval import utils

    windows = map(
        utils.make_disjoint_window,
        utils.get_rolling_token_windows(
            token_list=lm.tok_encode(text),
            prefix_token=lm.prefix_token_id,
            max_seq_len=lm.max_length,
            context_len=1,
        ),
    )
    return [(list(c) + list(t))[-(lm.max_length + 1) :][:-1] for c, t in windows]


def document_windows(lm: Any, limit: int) -> list[tuple[int, int, list[int]]]:
    """``(document, window, ids)`` of the first ``limit`` posgen_prose documents."""
    docs = prose_documents(limit)
    return [
        (d, w, ids)
        for d, doc in enumerate(docs)
        for w, ids in enumerate(rolling_windows(lm, doc["text"]))
    ]


def probe_donor(lm: Any, tokens: int) -> LogitDonor:
    """The ``logits=foreign`` donor: the distance terms of the fit of the first ``tokens``
    tokens of the decomposition's probe text (another sequence than any document)."""
    ids = probe_token_windows(lm.tokenizer, docs=1, tokens=tokens)[0]
    return LogitDonor(distance_terms(lm.model, ids), f"probe text, first {tokens} tokens")


def predict(folder: CauseFolder, lm: Any, progress: bool = False) -> None:
    """The prediction table of the folder's documents and schemes (module doc)."""
    import pandas as pd

    cfg = folder.config
    windows = document_windows(lm, cfg.limit)
    schemes = [registry.parse("position", s) for s in cfg.schemes]
    lm.set_perturbation(None, None, cfg.seed)
    alibi = position_family_of(lm.model).kind == "alibi"
    window_rows = alibi_window_rows if alibi else rotary_window_rows
    rows = predict_windows(
        lm.model, [w for _, _, w in windows], schemes, cfg.seed, progress, window_rows
    )
    table = pd.DataFrame(rows)
    index = table.pop("doc")
    table.insert(0, "window", [windows[k][1] for k in index])
    table.insert(0, "document", [windows[k][0] for k in index])
    table.insert(0, "model", cfg.model.label)
    atomic_write_parquet(folder.prediction_path, table)


def run(
    folder: CauseFolder, device: str | None, progress: Callable[[str], None] | None = None
) -> dict[str, float]:
    """Load once, score the unfinished cells (a line per cell to ``progress``), run the
    prediction if missing; seconds per step."""
    cfg = folder.config
    cells = cfg.cells()
    todo = [c for c, _ in cells if not folder.has_cell(c)]
    # no schemes (a learned-absolute model): no prediction
    need_prediction = bool(cfg.schemes) and not folder.prediction_path.is_file()
    if not todo and not need_prediction:
        return {}
    with open(folder.root / "lm_eval.log", "a", encoding="utf-8") as log:
        with contextlib.redirect_stderr(log):  # transformers' and lm-eval's bars and notes
            lm = load_entry_lm(cfg.model, cfg.batch_size, cfg.seed, device)
            if any(c.startswith("foreign-") for c in todo):
                longest = max(len(w) for _, _, w in document_windows(lm, cfg.limit))
                lm.logit_donor = probe_donor(lm, longest)
        lm.prefix_reuse = PrefixReuse(lm.model)
        timings = score_cells(folder, lm, cells, cfg.limit, cfg.seed, progress, log)
        if need_prediction:
            start = time.perf_counter()
            predict(folder, lm)
            timings["prediction"] = time.perf_counter() - start
    return timings
