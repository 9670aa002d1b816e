"""Tables of the decomposition: model-level summary, per-layer means, and their files."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd

from posgen.atomic import atomic_write

# what a[i−j] means for each position family (:mod:`posgen.harness.model_side.family`)
MEANINGS = {
    "rotary": "what the model's rotations make of the offset i−j (learned through RoPE)",
    "absolute": "whatever the model learned of i−j through its position table (no built-in "
    "term: the positions enter once, added to the token embeddings)",
    "alibi": "the known linear bias −m_h·(i−j) plus whatever q·k learned (the fit of the "
    "content part q·k alone shows the latter)",
    "none": "only what the causal mask lets the model infer (no position signal)",
}
# the past-context figures of a head (:mod:`posgen.harness.decomposition.past_context`)
PAST_COLUMNS = (
    "r_3axis_before_context",
    "r_3axis_past_context",
    "a_trend_rms_before",
    "a_trend_rms_past",
)

R_HIGH = 0.9  # summary: share of heads with r above this


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    """Model-level summary: one row per (model, random_init, n, and where the table has
    them position_family and logit_part) over all (doc, layer, head), with the family's
    ``distance_term``: what its a[i−j] means.

    Mean, median and 10th percentile of each r, share of rows with r > 0.9, mean term
    shares, the chance level, the median logit std and the share of distance-dominated
    rows (share_distance > 0.5). The last two make position-only, collapsed heads (as in
    deep random-init layers) visible: they can fit as well as trained heads.
    """
    import pandas as pd

    rows = []
    keys = ["model", "random_init", "n", *family_columns(table)]
    for key, g in table.groupby(keys, sort=False):
        row = dict(zip(keys, key, strict=True))
        if "position_family" in row:  # what a[i−j] is in this family
            row["distance_term"] = MEANINGS[row["position_family"]]
        row.update(docs=g["doc"].nunique(), heads=len(g[["layer", "head"]].drop_duplicates()))
        for col in ("r_3axis", "r_2axis", "r_distance_key", "r_row_centred"):
            row[f"{col}_mean"] = g[col].mean()
            row[f"{col}_median"] = g[col].median()
            row[f"{col}_p10"] = g[col].quantile(0.1)
            row[f"{col}_share_gt_{R_HIGH}"] = (g[col] > R_HIGH).mean()
        for col in ("share_distance", "share_query", "share_key", "chance_r", "chance_r_2axis"):
            row[f"{col}_mean"] = g[col].mean()
        row["logit_std_median"] = g["logit_std"].median()
        row["share_distance_dominated"] = (g["share_distance"] > 0.5).mean()
        rows.append(row)
    return pd.DataFrame(rows)


def layer_means(table: pd.DataFrame) -> pd.DataFrame:
    """Per-layer means of r and term shares, per (model, random_init, n)."""
    cols = [
        "r_3axis",
        "r_2axis",
        "r_distance_key",
        "r_row_centred",
        "share_distance",
        "share_query",
        "share_key",
        "logit_std",
    ]
    cols += [c for c in PAST_COLUMNS if c in table.columns]
    keys = ["model", "random_init", "n", *family_columns(table), "layer"]
    return table.groupby(keys, sort=False)[cols].mean().reset_index()


def family_columns(table: pd.DataFrame) -> list[str]:
    """The position-family columns of a table that has them (``position_family``, and
    ``logit_part``: ALiBi's full logits and its q·k part are summarised apart)."""
    return [c for c in ("position_family", "logit_part") if c in table.columns]


def past_context_table(per_layer: pd.DataFrame) -> pd.DataFrame:
    """The per-layer figures before and past the trained context (from ``layer_means``)."""
    keep = ["model", "random_init", "layer", "r_3axis", *PAST_COLUMNS]
    return per_layer[[c for c in keep if c in per_layer.columns]]


def write_outputs(
    out: Path, table: pd.DataFrame, summary: pd.DataFrame, per_layer: pd.DataFrame
) -> None:
    """heads.parquet, summary.csv/.parquet and layers.csv in ``out``, each written atomically."""

    out = Path(out)
    atomic_write(out / "heads.parquet", lambda p: table.to_parquet(p, index=False))
    atomic_write(out / "summary.parquet", lambda p: summary.to_parquet(p, index=False))
    atomic_write(out / "summary.csv", lambda p: summary.to_csv(p, index=False))
    atomic_write(out / "layers.csv", lambda p: per_layer.to_csv(p, index=False))
