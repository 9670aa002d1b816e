"""Companion experiments of the logit decomposition: controlled distance and the q/k pattern.

Both capture from the model's own forward (``attention_capture``) on the embedded probe
windows, and are meant to be run on a trained model and on its random-init twin
(``posgen.harness.decomposition.pipeline.random_init_twin``) side by side.

Controlled distance. In a window of n tokens, the query block Q is the last m = n/4
tokens, the key block K is m tokens starting at token ``SINK`` (past the attention-sink
region), and the reference keys R are the tokens between K and Q. The tokens are kept;
only K's position ids move, so that its last key sits at a fake distance d before the
first query (all positions get a common offset so every d fits; RoPE is relative; an
explicit all-ones attention mask keeps the causal mask in token order). Per head:

    key_stability(d) = corr_j( κ_d[j], κ_true[j] ),  κ[j] = mean_{i∈Q} W[i, j] − mean_{Q×K} W
    block_offset(d)  = mean_{i∈Q} ( mean_{j∈K} W[i, j] − mean_{r∈R} W[i, r] )
    predicted(d)     = the same offset computed from the true-position fit's distance term a

so "the key component stays" reads key_stability ≈ 1 and "the distance component follows d"
reads block_offset(d) tracking predicted(d). Nothing here assumes either holds.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from posgen.atomic import atomic_write
from posgen.harness.additive_fit.logit_fit import FitOptions, LayoutCache, fit_heads
from posgen.harness.decomposition.probe import probe_token_windows
from posgen.harness.decomposition.qk_pattern import (
    check_half_split,
    subspace_stats,
    subspace_wavelengths,
)
from posgen.harness.model_side.logits.capture import capture_forward
from posgen.results.report.decomposition_plots import plot_lines

if TYPE_CHECKING:
    import pandas as pd
    import torch

SINK = 4
DEFAULT_DISTANCES = (1, 4, 16, 64, 128)


def _blocks(n: int) -> tuple[slice, slice, slice]:
    m = n // 4
    if n < 16:
        raise ValueError(f"controlled distance needs at least 16 tokens, got {n}")
    return slice(n - m, n), slice(SINK, SINK + m), slice(SINK + m, n - m)


def _block_stats(logits: torch.Tensor, n: int) -> dict[str, torch.Tensor]:
    """Per-head block statistics of ``logits`` [H, n, n] (float64 results on CPU)."""
    q, k, r = _blocks(n)
    s = logits[:, q, k].double()  # [H, m, m]; every key of K and R precedes every query of Q
    ref_mean = logits[:, q, r].double().mean(-1)  # [H, m]
    return {
        "kappa": (s.mean(1) - s.mean((1, 2))[:, None]).cpu(),
        "offset": (s.mean(-1) - ref_mean).mean(-1).cpu(),
    }


def _predicted_offset(a: torch.Tensor, pos: torch.Tensor, n: int) -> torch.Tensor:
    """Offset predicted by the distance term a [H, n] at positions ``pos`` [n]; NaN if out of range."""
    q, k, r = _blocks(n)
    dist_k = pos[q][:, None] - pos[k][None, :]
    dist_r = pos[q][:, None] - pos[r][None, :]
    if dist_k.max() >= a.shape[-1] or dist_k.min() < 0:
        return torch.full((a.shape[0],), float("nan"), dtype=torch.float64)
    return (a[:, dist_k].mean(-1) - a[:, dist_r].mean(-1)).mean(-1)


def controlled_distance_table(
    model,
    tokenizer,
    *,
    tokens: int = 256,
    docs: int = 2,
    distances=DEFAULT_DISTANCES,
    label: str = "model",
    progress: bool = True,
) -> pd.DataFrame:
    """Rows (label, doc, layer, head, distance, key_stability, block_offset, predicted_offset)."""
    import pandas as pd
    import torch
    from tqdm.auto import tqdm

    n = tokens
    q, k, _ = _blocks(n)
    offset = max(distances) + n
    base = torch.arange(n) + offset
    true_distance = int(base[q.start] - base[k.stop - 1])
    layouts, full = LayoutCache(), FitOptions().apply(torch.ones(n, n, dtype=torch.bool))
    rows = []
    windows = probe_token_windows(tokenizer, docs=docs, tokens=tokens)
    for doc, ids in enumerate(
        tqdm(windows, desc=f"controlled distance {label}", disable=not progress)
    ):
        true_stats, fit_a = _true_position_fit(model, ids, base, layouts, full, n)
        for d in (*distances, true_distance):
            pos = base.clone()
            pos[k] = base[q.start] - d - (k.stop - k.start - 1) + torch.arange(k.stop - k.start)
            stats: dict[int, dict] = {}
            capture_forward(
                model,
                ids,
                lambda cap, s=stats: s.__setitem__(cap.layer, _block_stats(cap.logits[0], n)),
                pos,
            )
            key = {"label": label, "doc": doc, "distance": d, "true_distance": d == true_distance}
            rows.extend(_distance_rows(stats, true_stats, fit_a, pos, n, key))
    return pd.DataFrame(rows)


def _true_position_fit(
    model, ids: list[int], base: torch.Tensor, layouts, full: torch.Tensor, n: int
) -> tuple[dict[int, dict], dict[int, torch.Tensor]]:
    """One document of n tokens at its true positions ``base`` [n]: per layer, the block
    statistics (:func:`_block_stats`) and the distance term a [H, n] of the exact fit of
    its logits over ``full`` [n, n] (the fit's mask before the model's own), its layouts
    kept in ``layouts`` (a ``LayoutCache``)."""

    true_stats, fit_a = {}, {}

    def keep_true(cap) -> None:
        true_stats[cap.layer] = _block_stats(cap.logits[0], n)
        layout = layouts.get(full & cap.attended[0, 0].cpu(), cap.logits.device)
        fit_a[cap.layer] = fit_heads(cap.logits[0], layout).a.cpu()

    capture_forward(model, ids, keep_true, base)
    return true_stats, fit_a


def _distance_rows(stats, true_stats, fit_a, pos, n: int, key: dict) -> list[dict]:
    """One row per (layer, head) of one document at one fake distance (``key``: label, doc,
    distance, true_distance)."""
    import torch

    rows = []
    for layer, st in stats.items():
        ref = true_stats[layer]
        pred = _predicted_offset(fit_a[layer], pos, n)
        for head in range(st["offset"].shape[0]):
            kappa = torch.stack([st["kappa"][head], ref["kappa"][head]])
            rows.append(
                {
                    "label": key["label"],
                    "doc": key["doc"],
                    "layer": layer,
                    "head": head,
                    "distance": key["distance"],
                    "true_distance": key["true_distance"],
                    "key_stability": float(torch.corrcoef(kappa)[0, 1]),
                    "block_offset": float(st["offset"][head]),
                    "predicted_offset": float(pred[head]),
                }
            )
    return rows


def qk_pattern_table(
    model,
    tokenizer,
    *,
    tokens: int = 256,
    docs: int = 2,
    label: str = "model",
    progress: bool = True,
) -> pd.DataFrame:
    """Per (layer, head, RoPE subspace): key mean norm, key spread, their ratio and the phase
    concentration of pre-RoPE queries and keys, averaged over ``docs`` probe windows."""
    import pandas as pd
    from tqdm.auto import tqdm

    acc: dict[int, dict] = {}
    wavelengths = {}

    def consumer(cap) -> None:
        query = cap.unrotate(cap.query)[0]  # raises for a model without RoPE
        cos, sin = cap.position_embeddings
        rot = check_half_split(cos)
        stats = subspace_stats(query, cap.unrotate(cap.key)[0], rot)
        wavelengths[cap.layer] = subspace_wavelengths(cos[0], sin[0], rot).cpu()
        for name, value in stats.items():
            acc.setdefault(cap.layer, {}).setdefault(name, []).append(value.cpu())

    windows = probe_token_windows(tokenizer, docs=docs, tokens=tokens)
    for ids in tqdm(windows, desc=f"q/k pattern {label}", disable=not progress):
        capture_forward(model, ids, consumer)
    return pd.DataFrame(_qk_pattern_rows(acc, wavelengths, label))


def _qk_pattern_rows(
    acc: dict[int, dict[str, list]], wavelengths: dict[int, torch.Tensor], label: str
) -> list[dict]:
    """One row per (layer, head, subspace): each statistic of ``acc`` (per layer, name:
    one [H, M] tensor per document) averaged over the documents, the subspace's
    wavelength and the key mean norm over the key spread."""
    rows = []
    for layer, stats in sorted(acc.items()):
        mean = {k: sum(v) / len(v) for k, v in stats.items()}
        heads, subspaces = mean["key_mean_norm"].shape
        for head in range(heads):
            for m in range(subspaces):
                row = {
                    "label": label,
                    "layer": layer,
                    "head": head,
                    "subspace": m,
                    "wavelength": float(wavelengths[layer][m]),
                }
                row.update({k: float(v[head, m]) for k, v in mean.items()})
                row["key_mean_to_spread"] = row["key_mean_norm"] / max(row["key_spread"], 1e-30)
                rows.append(row)
    return rows


def controlled_distance_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per (label, distance): mean key stability, and the change of the block offset from the
    true-position condition, observed vs predicted by the distance term (mean over heads and
    documents; ``offset_pred_corr`` = correlation across heads of observed vs predicted change)."""
    import pandas as pd

    t = table.copy()
    true = t[t["true_distance"]].set_index(["label", "doc", "layer", "head"])
    idx = pd.MultiIndex.from_frame(t[["label", "doc", "layer", "head"]])
    t["offset_change"] = t["block_offset"].to_numpy() - true.loc[idx, "block_offset"].to_numpy()
    t["predicted_change"] = (
        t["predicted_offset"].to_numpy() - true.loc[idx, "predicted_offset"].to_numpy()
    )
    rows = []
    for (label, d), g in t.groupby(["label", "distance"], sort=True):
        rows.append(
            {
                "label": label,
                "distance": d,
                "true_distance": bool(g["true_distance"].all()),
                "key_stability_mean": g["key_stability"].mean(),
                "key_stability_median": g["key_stability"].median(),
                "offset_change_mean": g["offset_change"].mean(),
                "predicted_change_mean": g["predicted_change"].mean(),
                "offset_pred_corr": g["offset_change"].corr(g["predicted_change"]),
            }
        )
    return pd.DataFrame(rows)


def qk_pattern_summary(table: pd.DataFrame) -> pd.DataFrame:
    """Per (label, subspace): means over layers and heads, with the subspace's wavelength."""
    cols = [
        "wavelength",
        "key_mean_norm",
        "key_spread",
        "key_mean_to_spread",
        "key_phase_concentration",
        "query_phase_concentration",
    ]
    return table.groupby(["label", "subspace"], sort=True)[cols].mean().reset_index()


def write_experiments(
    out, model, tokenizer, *, tokens: int, docs: int, label: str, twin=None
) -> dict[str, pd.DataFrame]:
    """Run both experiments on ``model`` (and ``twin``, labelled ``label + ' random-init'``);
    write tables (CSV, parquet) and plots into ``out``; return the summaries."""
    from pathlib import Path

    import pandas as pd

    out = Path(out)
    models = [(label, model)] + ([(f"{label} random-init", twin)] if twin is not None else [])
    cd = pd.concat(
        [
            controlled_distance_table(m, tokenizer, tokens=tokens, docs=docs, label=lb)
            for lb, m in models
        ],
        ignore_index=True,
    )
    qk = pd.concat(
        [qk_pattern_table(m, tokenizer, tokens=tokens, docs=docs, label=lb) for lb, m in models],
        ignore_index=True,
    )
    summaries = {
        "controlled_distance": controlled_distance_summary(cd),
        "qk_pattern": qk_pattern_summary(qk),
    }
    for name, frame in (("controlled_distance", cd), ("qk_pattern", qk)):
        atomic_write(out / f"{name}.parquet", lambda p, f=frame: f.to_parquet(p, index=False))
        atomic_write(
            out / f"{name}_summary.csv", lambda p, f=summaries[name]: f.to_csv(p, index=False)
        )
    plots = {
        "controlled_distance": (
            "distance",
            ["key_stability_mean", "offset_change_mean", "predicted_change_mean"],
        ),
        "qk_pattern": (
            "wavelength",
            ["key_mean_to_spread", "key_phase_concentration", "query_phase_concentration"],
        ),
    }
    for name, (x, ys) in plots.items():
        title = f"{name.replace('_', ' ')}, n={tokens}"
        plot_lines(summaries[name], x, ys, out / f"{name}.png", title, group="label", logx=True)
    return summaries
