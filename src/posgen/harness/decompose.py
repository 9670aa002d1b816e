"""``posgen decompose``: fit W[i, j] ≈ a[i−j] + b[i] + c[j] for every head of a model.

Streams each layer's logits from the model's own forward (``attention_capture``) into the
exact fit (``posgen.results.logit_fit``) and the distance + key form
(``posgen.results.qk_pattern``), one probe document at a time, and returns a tidy table:
one row per (document, layer, head). ``random_init=True`` measures the same architecture
with seeded random weights on the same probe documents: report it beside the trained model.

Top-level imports stay light: torch and transformers load inside the functions.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    import pandas as pd
    from transformers import PreTrainedModel

from posgen.harness.decompose_io import (  # light: stdlib + lazily imported pandas
    probe_token_windows,
    write_outputs,
)

DEFAULT_DOCS = 8
DEFAULT_TOKENS = 256
R_HIGH = 0.9  # summary: share of heads with r above this
# dtype of the O(n²) sums while streaming: float32 halves the fit's cost and moves r by
# ~1e-8 (logit_fit.head_sums); the plotted single-head maps use float64
SUM_DTYPE = "float32"


def load_model(model: str, *, random_init: bool = False, seed: int = 0, device=None):
    """(model, tokenizer) in float32 eval mode; ``embedded`` resolves to SmolLM2-135M."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

    from posgen.harness.embedded import resolve_pretrained

    path = resolve_pretrained(model)
    tokenizer = AutoTokenizer.from_pretrained(path)
    if random_init:
        net = random_init_twin(AutoConfig.from_pretrained(path), seed=seed, name=str(model))
    else:
        net = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    return net.to(device or "cpu").eval(), tokenizer


def random_init_twin(config, *, seed: int, name: str) -> PreTrainedModel:
    """The same architecture with random weights from a seed derived with posgen.seeding."""
    import torch
    from transformers import AutoModelForCausalLM

    from posgen.perturbations.seeding import item_rng

    torch_seed = int(item_rng(seed, "random-init-twin", name).integers(0, 2**62))
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(torch_seed)
        return AutoModelForCausalLM.from_config(config, dtype=torch.float32).eval()


class _LayerSums(NamedTuple):
    """What ``_LayerFitter`` keeps of one layer until ``finish()``: O(P n), not the logits."""

    layer: int
    layout: Any  # logit_fit.FitLayout
    sums: Any  # logit_fit.HeadSums of W
    d_sums: tuple  # (diagonal, column) sums of the distance map D
    restricted: bool  # the layer attends to fewer entries than causal (e.g. sliding window)


class _LayerFitter:
    """Consumer of ``LayerCapture``s. During the forward it reduces each layer's logits to
    their O(P n) sums (``head_sums``, ``distance_sums``) and lets the logits go; ``finish()``
    after the forward solves all layers that share a layout in one batched product and
    appends the tidy rows of document ``doc``."""

    def __init__(self, options, layouts) -> None:
        self.options, self.layouts = options, layouts
        self.rows: list[dict[str, Any]] = []
        self.doc = 0
        self._pending: list[_LayerSums] = []
        self._last: tuple | None = None  # (attended tensor, layout, restricted)

    def __call__(self, cap) -> None:
        import torch

        from posgen.results.logit_fit import head_sums
        from posgen.results.qk_pattern import distance_sums

        if cap.logits.shape[0] != 1:
            raise ValueError("decompose fits one document per forward (batch size 1)")
        logits = cap.logits[0]  # [H, n, n]
        layout, window = self._layout(cap.attended)
        sums = head_sums(logits, layout, dtype=getattr(torch, SUM_DTYPE))
        d_sums = distance_sums(_distance_axis(cap, layout), layout)
        self._pending.append(_LayerSums(cap.layer, layout, sums, d_sums, window))

    def _layout(self, attended_bhnn):
        """(layout, restricted) for ``cap.attended``; layers sharing one mask share the work."""
        import torch

        if self._last is not None and self._last[0] is attended_bhnn:
            return self._last[1:]
        attended = attended_bhnn[0, 0]
        layout = self.layouts.get(self.options.apply(attended), attended.device)
        window = bool((~attended & torch.ones_like(attended).tril()).any())  # e.g. sliding
        self._last = (attended_bhnn, layout, window)
        return layout, window

    def finish(self) -> None:
        """Fit the layers captured since the last ``finish`` and append their rows."""
        import torch

        from posgen.results.logit_fit import HeadSums, fit_sums
        from posgen.results.qk_pattern import distance_key_r

        pending, self._pending, self._last = self._pending, [], None
        groups: dict[int, list[_LayerSums]] = {}
        for item in pending:
            groups.setdefault(id(item.layout), []).append(item)
        by_layer = {}
        for items in groups.values():
            layout = items[0].layout
            sums = HeadSums.cat([it.sums for it in items])
            d_sums = tuple(torch.cat([it.d_sums[k] for it in items]) for k in (0, 1))
            fits = fit_sums(sums, layout)
            values = self._values(fits, distance_key_r(sums, d_sums, layout))
            start = 0
            for it in items:
                heads = it.sums.mean.shape[0]
                by_layer[it.layer] = self._rows(
                    it.layer,
                    {k: v[start : start + heads] for k, v in values.items()},
                    fits,
                    it.restricted,
                )
                start += heads
        for layer in sorted(by_layer):
            self.rows.extend(by_layer[layer])

    @staticmethod
    def _values(fits, r_dk) -> dict[str, list[float]]:
        cols = {
            "r_3axis": fits.r_3axis,
            "r_2axis": fits.r_2axis,
            "r_distance_key": r_dk,
            "r_row_centred": fits.r_row_centred,
            "r2": fits.r2,
            "residual_std": fits.residual_std,
            "logit_std": fits.logit_std,
            "share_distance": fits.share_distance,
            "share_query": fits.share_query,
            "share_key": fits.share_key,
        }
        return {k: v.double().cpu().tolist() for k, v in cols.items()}

    def _rows(self, layer, values, fits, window) -> list[dict[str, Any]]:
        return [
            {
                "doc": self.doc,
                "layer": layer,
                "head": head,
                "n": fits.a.shape[-1],
                "n_entries": fits.n_entries,
                **{k: v[head] for k, v in values.items()},
                "chance_r": fits.chance_r,
                "chance_r_2axis": fits.chance_r_2axis,
                "restricted_mask": window,
            }
            for head in range(len(values["r_3axis"]))
        ]


def _distance_axis(cap, layout):
    """D[h, i, j] = s·q_i·R(j)k̄ (``posgen.results.qk_pattern``): k̄ is the mean pre-RoPE key
    of each KV head over the fitted key positions, un-rotated and rotated by the model's own
    RoPE; computed per KV head and matched to its query heads."""
    from posgen.results.qk_pattern import DistanceMap

    groups = cap.query.shape[1] // cap.kv_heads
    keys = cap.key[:, ::groups]  # [1, KV, n, d]: the expanded heads repeat each KV head
    key_pre = cap.unrotate(keys)
    used = (layout.count_j > 0).to(key_pre.dtype)
    mean_key = (key_pre * used[:, None]).sum(-2, keepdim=True) / used.sum()
    rotated = cap.rotate(mean_key.expand_as(key_pre).contiguous())[0]  # [KV, n, d]
    rotated = rotated.repeat_interleave(groups, dim=0)
    return DistanceMap(cap.query[0], rotated, cap.scaling)


def decompose_model(
    model: str | PreTrainedModel,
    *,
    tokenizer=None,
    docs: int = DEFAULT_DOCS,
    tokens: int = DEFAULT_TOKENS,
    random_init: bool = False,
    seed: int = 0,
    device=None,
    progress: bool = True,
    include_diagonal: bool = True,
    sink_keys: int = 0,
) -> pd.DataFrame:
    """The tidy per-head table of one model on ``docs`` probe windows of ``tokens`` tokens.

    ``model``: a name/path (``embedded`` = SmolLM2-135M) or a loaded model (then pass its
    ``tokenizer``). With ``random_init`` the weights are replaced by a seeded random-init
    twin of the same architecture. Columns: model, random_init, seed, doc, layer, head, n,
    n_entries, r_3axis, r_2axis, r_distance_key, r_row_centred, r2, residual_std, logit_std,
    share_distance, share_query, share_key, chance_r, chance_r_2axis, restricted_mask,
    include_diagonal, sink_keys.
    """
    import pandas as pd
    import torch
    from tqdm.auto import tqdm

    from posgen.harness.attention_capture import capture_attention
    from posgen.results.logit_fit import FitOptions, LayoutCache

    net, tokenizer, name = _resolve(model, tokenizer, random_init, seed, device)
    windows = probe_token_windows(tokenizer, docs=docs, tokens=tokens)
    fitter = _LayerFitter(FitOptions(include_diagonal, sink_keys), LayoutCache())
    dev = next(net.parameters()).device
    with torch.no_grad(), capture_attention(net, fitter):
        for k, ids in enumerate(tqdm(windows, desc=f"decompose {name}", disable=not progress)):
            fitter.doc = k
            net(
                torch.tensor([ids], device=dev),
                attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=dev),
                use_cache=False,
            )
            fitter.finish()
    table = pd.DataFrame(fitter.rows)
    table.insert(0, "seed", seed)
    table.insert(0, "random_init", random_init)
    table.insert(0, "model", name)
    table["include_diagonal"], table["sink_keys"] = include_diagonal, sink_keys
    return table


def _resolve(model, tokenizer, random_init: bool, seed: int, device):
    if isinstance(model, str):
        net, tok = load_model(model, random_init=random_init, seed=seed, device=device)
        return net, tokenizer or tok, model
    if tokenizer is None:
        raise ValueError("pass tokenizer= with a loaded model")
    name = getattr(model.config, "name_or_path", "") or type(model).__name__
    if random_init:
        model = random_init_twin(model.config, seed=seed, name=name)
    return model.to(device or next(model.parameters()).device).eval(), tokenizer, name


def summarize(table: pd.DataFrame) -> pd.DataFrame:
    """Model-level summary: one row per (model, random_init, n) over all (doc, layer, head).

    Mean, median and 10th percentile of each r, share of rows with r > 0.9, mean term
    shares, the chance level, the median logit std and the share of distance-dominated
    rows (share_distance > 0.5). The last two make position-only, collapsed heads (as in
    deep random-init layers) visible: they can fit as well as trained heads.
    """
    import pandas as pd

    rows = []
    for key, g in table.groupby(["model", "random_init", "n"], sort=False):
        row = dict(zip(["model", "random_init", "n"], key, strict=True))
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
    return (
        table.groupby(["model", "random_init", "n", "layer"], sort=False)[cols].mean().reset_index()
    )


def head_logit_maps(
    model: PreTrainedModel,
    tokenizer,
    *,
    tokens: int,
    layer: int,
    head: int,
    doc: int = 0,
    include_diagonal: bool = True,
    sink_keys: int = 0,
):
    """(actual, fitted) [n, n] float64 arrays of one head on probe window ``doc``; NaN = unfitted."""
    import torch

    from posgen.harness.attention_capture import capture_attention
    from posgen.results.logit_fit import FitLayout, FitOptions, fit_heads, fitted_map

    ids = probe_token_windows(tokenizer, docs=doc + 1, tokens=tokens)[doc]
    kept = {}

    def keep(cap) -> None:
        if cap.layer == layer:
            kept["logits"], kept["attended"] = (
                cap.logits[0, head : head + 1].clone(),
                cap.attended[0, 0].clone(),
            )

    dev = next(model.parameters()).device
    with torch.no_grad(), capture_attention(model, keep):
        model(
            torch.tensor([ids], device=dev),
            use_cache=False,
            attention_mask=torch.ones(1, len(ids), dtype=torch.long, device=dev),
        )
    layout = FitLayout.from_mask(FitOptions(include_diagonal, sink_keys).apply(kept["attended"]))
    fits = fit_heads(kept["logits"], layout)
    actual = torch.where(layout.mask, kept["logits"][0].double(), float("nan"))
    return actual.cpu().numpy(), fitted_map(fits, 0, layout).cpu().numpy()


def write_plots(
    out: str | Path,
    table: pd.DataFrame,
    *,
    model: str | PreTrainedModel,
    tokenizer=None,
    device=None,
) -> list[Path]:
    """heatmap_r_<variant>.png per (random_init, n) and head_map.png (the trained model's
    head with the median r_3axis, document 0, beside its fit). Returns the paths."""
    from posgen.results.decomposition_plots import plot_head_map, plot_r_heatmap

    out, paths = Path(out), []
    for (rand, n), g in table.groupby(["random_init", "n"]):
        variant = f"{'random_init' if rand else 'trained'}_n{n}"
        paths.append(out / f"heatmap_r_{variant}.png")
        plot_r_heatmap(g, paths[-1], title=f"{g['model'].iloc[0]} {variant}: r_3axis")
    trained = table[~table["random_init"].astype(bool)]
    source = trained if len(trained) else table
    doc0 = source[source["doc"] == source["doc"].min()].sort_values("r_3axis")
    pick = doc0.iloc[len(doc0) // 2]
    net, tok, _ = _resolve(model, tokenizer, bool(pick["random_init"]), int(pick["seed"]), device)
    actual, fitted = head_logit_maps(
        net,
        tok,
        tokens=int(pick["n"]),
        layer=int(pick["layer"]),
        head=int(pick["head"]),
        doc=int(pick["doc"]),
        include_diagonal=bool(pick["include_diagonal"]),
        sink_keys=int(pick["sink_keys"]),
    )
    paths.append(out / "head_map.png")
    plot_head_map(
        actual,
        fitted,
        paths[-1],
        f"{pick['model']} layer {pick['layer']} head "
        f"{pick['head']} doc {pick['doc']}: r_3axis = {pick['r_3axis']:.3f} (median head)",
    )
    return paths


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--model",
        default="embedded",
        help="model name or folder (default: embedded = SmolLM2-135M)",
    )
    parser.add_argument(
        "--random-init",
        action="store_true",
        help="also fit a seeded random-init twin of the same architecture",
    )
    parser.add_argument(
        "--docs",
        type=_positive,
        default=DEFAULT_DOCS,
        help=f"probe windows (default {DEFAULT_DOCS})",
    )
    parser.add_argument(
        "--tokens",
        type=_positive,
        default=DEFAULT_TOKENS,
        help=f"tokens per window, n (default {DEFAULT_TOKENS})",
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the random-init twin")
    parser.add_argument("--device", default=None, help="cpu, cuda, ... (default: cuda if any)")
    parser.add_argument(
        "--experiments",
        action="store_true",
        help="also run controlled distance and the q/k pattern (and on the "
        "random-init twin with --random-init)",
    )
    parser.add_argument(
        "--out",
        type=Path,
        default=Path("posgen-runs/decompose"),
        help="output folder (default posgen-runs/decompose)",
    )


def _experiments(args: argparse.Namespace, device: str) -> None:
    from posgen.harness.decompose_experiments import write_experiments

    model, tokenizer = load_model(args.model, device=device)
    twin = None
    if args.random_init:
        twin = random_init_twin(model.config, seed=args.seed, name=args.model).to(device)
    summaries = write_experiments(
        args.out,
        model,
        tokenizer,
        tokens=args.tokens,
        docs=min(args.docs, 2),
        label=args.model,
        twin=twin,
    )
    for name, frame in summaries.items():
        print(f"{name}:\n{frame.to_string(index=False)}")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def main(args: argparse.Namespace) -> int:
    import pandas as pd
    import torch

    device = args.device or ("cuda" if torch.cuda.is_available() else "cpu")
    tables = [
        decompose_model(
            args.model, docs=args.docs, tokens=args.tokens, seed=args.seed, device=device
        )
    ]
    if args.random_init:
        tables.append(
            decompose_model(
                args.model,
                docs=args.docs,
                tokens=args.tokens,
                random_init=True,
                seed=args.seed,
                device=device,
            )
        )
    table = pd.concat(tables, ignore_index=True)
    summary = summarize(table)
    write_outputs(args.out, table, summary, layer_means(table))
    write_plots(args.out, table, model=args.model, device=device)
    if args.experiments:
        _experiments(args, device)
    with pd.option_context("display.width", 200, "display.max_columns", 40):
        print(summary.T.to_string(header=False))
    print(f"posgen decompose: wrote {args.out}")
    return 0
