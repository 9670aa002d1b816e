"""The decomposition of a model: fit W[i, j] ≈ a[i−j] + b[i] + c[j] for every head.

Streams each layer's logits from the model's own forward
(:mod:`posgen.harness.model_side.logits.capture`) into the exact fit
(:mod:`posgen.harness.decomposition.streaming_fit`), one probe document at a time, and
returns a tidy table: one row per (document, layer, head). ``random_init=True`` measures the
same architecture with seeded random weights on the same probe documents: report it beside
the trained model.

Top-level imports stay light: torch and transformers load inside the functions.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pandas as pd
    from transformers import PreTrainedModel

from posgen.harness import loading  # looked up at call time (tests replace its loaders)
from posgen.harness.additive_fit.logit_fit import (
    FitLayout,
    FitOptions,
    LayoutCache,
    fit_heads,
    fitted_map,
)
from posgen.harness.decomposition.probe import DEFAULT_DOCS, DEFAULT_TOKENS, probe_token_windows
from posgen.harness.decomposition.streaming_fit import LayerFitter
from posgen.harness.model_side.alibi.capture import alibi_capture_forward
from posgen.harness.model_side.attention.length import active_scheme
from posgen.harness.model_side.logits.capture import capture_forward
from posgen.harness.position_family import length_limit, position_family_of
from posgen.results.folder.config import ModelEntry
from posgen.results.report.decomposition_plots import HeadMap

HEAD_MAP_MAX_TOKENS = 2048  # head_map.png only for windows up to this length


def load_model(
    model: str | ModelEntry, *, random_init: bool = False, seed: int = 0, device=None, length=None
):
    """(model, tokenizer) in eval mode through :func:`posgen.harness.loading.load_model`;
    ``model`` is a name or folder (``embedded`` = SmolLM2-135M, float32) or a ModelEntry
    (its dtype, revision, adapter, ... as given); ``length`` a length scheme (a rope
    scaling is applied at load)."""
    from dataclasses import replace

    entry = model if isinstance(model, ModelEntry) else loading.model_entries([model])[0]
    if random_init and not entry.random_init:
        entry = replace(entry, random_init=True)
    loaded = loading.load_model(entry, device or "cpu", seed=seed, length=length)
    return loaded.model, loaded.tokenizer


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
    length=None,
    context: int | None = None,
    forward_context=None,
) -> pd.DataFrame:
    """The tidy per-head table of one model on ``docs`` probe windows of ``tokens`` tokens.

    ``length``: a ``LengthPerturbation`` (``posgen length``'s schemes): a rope scaling is
    applied when the model loads, and ``forward_context(model, ids)`` (a context manager
    factory, e.g. ``posgen length``'s forward for the scheme) wraps every captured forward
    (under Λ it must enter Λ's attention: :func:`decompose_windows`). ``context``: the
    trained context C; with it the table gets the ``past_context`` columns (NaN where
    n ≤ C) and a ``context`` column.

    ``model``: a name/path (``embedded`` = SmolLM2-135M) or a loaded model (then pass its
    ``tokenizer``). With ``random_init`` the weights are replaced by a seeded random-init
    twin of the same architecture. Columns: model, random_init, seed, doc, layer, head, n,
    n_entries, r_3axis, r_2axis, r_distance_key, r_row_centred, r2, residual_std, logit_std,
    share_distance, share_query, share_key, chance_r, chance_r_2axis, restricted_mask,
    fit_mask (causal, lambda-band:W or model-mask), include_diagonal, sink_keys. The fit
    itself is :func:`decompose_windows`.
    """
    net, tokenizer, name = _resolve(model, tokenizer, random_init, seed, device, length)
    _check_tokens(net, tokens)
    windows = probe_token_windows(tokenizer, docs=docs, tokens=tokens)
    rows = decompose_windows(
        net,
        windows,
        name=name,
        progress=progress,
        include_diagonal=include_diagonal,
        sink_keys=sink_keys,
        length=length,
        context=context,
        forward_context=forward_context,
    )
    return _tidy_table(rows, name, seed, random_init, include_diagonal, sink_keys, length, context)


def _check_tokens(model, tokens: int) -> None:
    """Refuse windows past the positions one forward of ``model`` takes (a learned table's
    rows, MPT's ``max_seq_len``), naming its config field, before any forward."""
    limit = length_limit(getattr(model, "config", None))
    if limit is not None and tokens > limit[1]:
        field, most = limit
        raise ValueError(
            f"tokens={tokens}: the model's config sets {field} = {most}, the most positions "
            f"one forward of it takes; pass tokens <= {most}"
        )


def _tidy_table(
    rows: list[dict],
    name: str,
    seed: int,
    random_init: bool,
    include_diagonal: bool,
    sink_keys: int,
    length,
    context: int | None,
) -> pd.DataFrame:
    """The fit's ``rows`` as :func:`decompose_model`'s table: the model's name, random-init
    flag and seed first, the settings of the fit last (``include_diagonal``, ``sink_keys``,
    and ``length``, the scheme's string, and ``context`` where given)."""
    import pandas as pd

    table = pd.DataFrame(rows)
    table.insert(0, "seed", seed)
    table.insert(0, "random_init", random_init)
    table.insert(0, "model", name)
    table["include_diagonal"], table["sink_keys"] = include_diagonal, sink_keys
    if length is not None:
        table["length"] = length.to_string()
    if context is not None:
        table["context"] = context
    return table


def decompose_windows(
    model: PreTrainedModel,
    windows: list[list[int]],
    *,
    name: str = "",
    progress: bool = True,
    include_diagonal: bool = True,
    sink_keys: int = 0,
    length=None,
    context: int | None = None,
    forward_context=None,
) -> list[dict]:
    """The fit W[i, j] ≈ a[i−j] + b[i] + c[j] of every head of a loaded ``model`` on the
    given token windows (lists of token ids, one forward each): one row per (window,
    layer, head), ``doc`` = the window's index (the columns of :func:`decompose_model`
    from ``doc`` to the ``past_context`` ones). ``length``: the scheme the model runs
    under, ``forward_context(model, ids)`` wraps each captured forward (under Λ it must
    enter :func:`posgen.harness.model_side.attention.lambda_attention.lambda_attention` for the scheme,
    as ``posgen length``'s forward does; checked), ``context`` = C gives the
    ``past_context`` columns. Under Λ (``LengthLambda``) the capture runs Λ's attention for
    the outputs and fits Λ's local band 0 ≤ i − j < W only (``fit_mask`` =
    ``lambda-band:W`` where n > W; the G global keys are left out of the fit,
    :mod:`posgen.harness.model_side.logits.capture`). Every row says the model's
    ``position_family`` (:mod:`posgen.harness.position_family`) and the ``logit_part``
    fitted: ``full`` (the pre-softmax logits; for RoPE and absolute positions q·k is all of
    them) and for ALiBi also ``qk``, the content part q·k without the bias."""
    from tqdm.auto import tqdm

    family, fitters = _family_fitters(model, include_diagonal, sink_keys, context)
    consumer, capture = _family_capture(family.kind, fitters)
    for k, ids in enumerate(tqdm(windows, desc=f"decompose {name}", disable=not progress)):
        with _forward_context(forward_context, model, ids):
            _check_lambda_active(length)
            for fitter in fitters.values():
                fitter.doc = k
            capture(model, ids, consumer)
        for fitter in fitters.values():
            fitter.finish()
    return [
        {**row, "position_family": family.kind, "logit_part": part}
        for part, fitter in fitters.items()
        for row in fitter.rows
    ]


def _family_fitters(model: PreTrainedModel, include_diagonal: bool, sink_keys: int, context):
    """(the model's position family, a streaming fitter per logit part it fits): ``full``,
    and for ALiBi also ``qk``; refuses an ALiBi attention the capture is not adapted to."""

    family = position_family_of(model)
    if family.logits_refused:
        raise ValueError(f"posgen decompose: {family.logits_refused}")
    options, layouts = FitOptions(include_diagonal, sink_keys), LayoutCache()
    # ALiBi: the full logits (bias included) and the content part q·k alone
    parts = ("full", "qk") if family.kind == "alibi" else ("full",)
    return family, {part: LayerFitter(options, layouts, context) for part in parts}


def _family_capture(kind: str, fitters: dict):
    """(consumer, capture function) of one position family's decomposition: for ALiBi the
    bias-capturing forward feeding each fitter its part of every layer's logits."""

    if kind != "alibi":
        return fitters["full"], capture_forward

    def both(cap) -> None:
        for part, fitter in fitters.items():
            fitter(cap.part(include_bias=part == "full"))

    return both, alibi_capture_forward


def _check_lambda_active(length) -> None:
    """Under Λ the capture reads the scheme from the enclosing ``lambda_attention`` block;
    without it the fit would silently be of plain causal attention."""
    if length is None or not length.uses_attention:
        return

    if active_scheme() != length:
        raise ValueError(
            f"decomposing under {length.to_string()} needs forward_context to enter "
            "lambda_attention or infllm_attention (posgen.harness.model_side.attention.length: "
            "length_attention(model, scheme); the door, posgen.harness.model_side.door.forward, "
            f"does under the scheme); the active scheme is {active_scheme()}"
        )


def _forward_context(forward_context, net, ids: list[int]):
    """``forward_context(net, ids)``, or a no-op context without one."""
    from contextlib import nullcontext

    return nullcontext() if forward_context is None else forward_context(net, ids)


def _resolve(model, tokenizer, random_init: bool, seed: int, device, length=None):
    if isinstance(model, (str, ModelEntry)):
        net, tok = load_model(
            model, random_init=random_init, seed=seed, device=device, length=length
        )
        return net, tokenizer or tok, model if isinstance(model, str) else model.label
    if tokenizer is None:
        raise ValueError("pass tokenizer= with a loaded model")
    name = getattr(model.config, "name_or_path", "") or type(model).__name__
    if random_init:
        model = loading.random_init_twin(model.config, seed=seed, name=name)
    return model.to(device or next(model.parameters()).device).eval(), tokenizer, name


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
    forward_context=None,
):
    """(actual, fitted) [n, n] float64 arrays of one head on probe window ``doc`` (the
    forward inside ``forward_context(model, ids)``, if given); NaN = unfitted. ALiBi: the
    full logits, bias included."""
    import torch

    _, capture_forward = _family_capture(position_family_of(model).kind, {"full": None})
    ids = probe_token_windows(tokenizer, docs=doc + 1, tokens=tokens)[doc]
    kept = {}

    def keep(cap) -> None:
        if cap.layer == layer:
            kept["logits"], kept["attended"] = (
                cap.logit_block(0, cap.query.shape[-2], heads=slice(head, head + 1))[0],
                cap.attended[0, 0].clone(),
            )

    with _forward_context(forward_context, model, ids):
        capture_forward(model, ids, keep)
    layout = FitLayout.from_mask(FitOptions(include_diagonal, sink_keys).apply(kept["attended"]))
    fits = fit_heads(kept["logits"], layout)
    actual = torch.where(layout.mask, kept["logits"][0].double(), float("nan"))
    return actual.cpu().numpy(), fitted_map(fits, 0, layout).cpu().numpy()


def median_head_map(
    table: pd.DataFrame,
    *,
    model: str | PreTrainedModel,
    tokenizer=None,
    device=None,
    length=None,
    forward_context=None,
) -> HeadMap | None:
    """The trained model's head with the median r_3axis on document 0 of ``table``, its
    logits recaptured (loaded under ``length`` and run in ``forward_context``, as the table
    was measured) and fitted
    (the model is reloaded when given by name). None past ``HEAD_MAP_MAX_TOKENS`` tokens:
    an n × n picture of a longer window would not be readable, and holding it costs O(n²)."""
    if int(table["n"].max()) > HEAD_MAP_MAX_TOKENS:
        return None
    trained = table[~table["random_init"].astype(bool)]
    source = trained if len(trained) else table
    doc0 = source[source["doc"] == source["doc"].min()].sort_values("r_3axis")
    pick = doc0.iloc[len(doc0) // 2]
    net, tok, _ = _resolve(
        model, tokenizer, bool(pick["random_init"]), int(pick["seed"]), device, length
    )
    actual, fitted = head_logit_maps(
        net,
        tok,
        tokens=int(pick["n"]),
        layer=int(pick["layer"]),
        head=int(pick["head"]),
        doc=int(pick["doc"]),
        include_diagonal=bool(pick["include_diagonal"]),
        sink_keys=int(pick["sink_keys"]),
        forward_context=forward_context,
    )
    title = (
        f"{pick['model']} layer {pick['layer']} head {pick['head']} doc {pick['doc']}: "
        f"r_3axis = {pick['r_3axis']:.3f} (median head)"
    )
    return HeadMap(actual, fitted, title)
