"""The decomposition's account of the evidence-depth curve (docs/depth.md).

On the documents of a log-likelihood depth task with the evidence moved in the text
(``perm_depth_<D>pct_<task>``, at each depth D), per document:

1. **the curve under each logits form**: the gold continuation's log-likelihood and
   whether it is the greedy one, from the task's own requests through
   ``lm.loglikelihood`` (what a depth cell scores), with ``logits=`` off (``plain``) and
   ``additive``, ``distance``, ``key`` in every layer (``lm.set_perturbation(logits=…)``:
   each layer's logits replaced by their exact fit W ≈ a[i−j] + b[i] + c[j] or one of
   its terms, :mod:`posgen.harness.model_side.logits.forms`);
2. **the question's attention mass on the evidence**, per layer and head, on the plain
   forward of the same tokens lm-eval scores (context and continuation, its last token
   dropped): with Q the question block's query rows (from the question's first token to
   the context's last) and E the evidence block's key columns (the evidence passage and
   its separator),

       mass = (1 / |Q|) Σ_{i ∈ Q} Σ_{j ∈ E} softmax_j(X[i, ·])

   for X = the logits W as the model computes them (``measured``: the captured
   q·kᵀ·scaling of the model's own forward, masked as the layer masks them) and X = the
   form's logits from the exact fit of W over every entry the layer attends
   (``additive``, ``distance``, ``key``: what ``logits=`` would put in that layer's
   softmax for this forward). The blocks come from the documents' field protocol, as
   ``positions=depth`` finds them (:func:`posgen.harness.hf_posgen.depth_rows.context_blocks`),
   never from markers in the text.

Only log-likelihood tasks with one request per document (``posgen_kv``,
``posgen_passage_qa``): ``logits=`` replaces whole forwards and refuses generation
(a KV cache), and a multiple-choice document's several continuations have no one gold
log-likelihood. The scores are :mod:`posgen.results.scores.depth_account`'s.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from posgen.harness.additive_fit.logit_fit import FitOptions, LayoutCache, fit_sums, head_sums
from posgen.harness.hf_posgen.depth_rows import FIELDS, context_blocks
from posgen.harness.input_error import InputError
from posgen.harness.model_side.alibi.capture import alibi_capture_forward
from posgen.harness.model_side.family import family_of
from posgen.harness.model_side.logits.capture import capture_forward
from posgen.harness.model_side.logits.forms import LogitForm, reversed_form_logits
from posgen.harness.model_side.logits.rows import fit_layout
from posgen.perturbations import registry
from posgen.perturbations.base import PerturbationError
from posgen.results.scores.depth_account import FIT_FORMS, LOGIT_FORMS, MASS_FORMS
from posgen.tasks import depth_suite
from posgen.tasks.naming import format_name

if TYPE_CHECKING:
    import pandas as pd
    import torch

DEPTHS = (0.0, 0.5, 1.0)  # the ends and the middle: the gap
TASKS = depth_suite.LOGLIKELIHOOD_TASKS  # the built-in log-likelihood depth tasks


@dataclass(frozen=True)
class AccountSpec:
    """What one model's account measures: ``tasks`` (base depth tasks) at ``depths`` on
    the first ``docs[task]`` documents, the prompt built as the run's cells build it
    (``prompt``: ``num_fewshot``, ``apply_chat_template``, ``fewshot_as_multiturn``,
    ``system_instruction``), ``seed`` the run's."""

    tasks: tuple[str, ...]
    docs: Mapping[str, int]
    depths: tuple[float, ...] = DEPTHS
    seed: int = 1234
    prompt: Mapping[str, Any] = field(default_factory=dict)


def account_tasks(tasks: Sequence[str]) -> tuple[str, ...]:
    """The built-in log-likelihood depth tasks among ``tasks`` (what the run accounts)."""
    return tuple(t for t in tasks if t in TASKS)


def depth_requests(lm: Any, task: str, depth: float, spec: AccountSpec, task_manager) -> list:
    """The requests of ``perm_depth_<D>pct_<task>`` on its first ``spec.docs[task]``
    documents, built as ``lm_eval.simple_evaluate`` builds them; a task without the field
    protocol, not scored by log-likelihood or with several requests per document is
    refused in one line."""
    name = format_name(registry.parse("text", f"depth:{float(depth)!r}"), task, spec.seed)  # type: ignore[arg-type]
    try:
        lm_task = task_manager.load([name])["tasks"][name]
    except PerturbationError as e:
        raise InputError(f"depth account: {e}") from None
    prompt = dict(spec.prompt)
    if prompt.get("num_fewshot") is not None:
        lm_task.set_config(key="num_fewshot", value=prompt["num_fewshot"])
    lm_task.set_fewshot_seed(seed=spec.seed)
    chat = bool(prompt.get("apply_chat_template"))
    if chat:
        lm.chat_template(prompt["apply_chat_template"])
    lm_task.build_all_requests(
        limit=spec.docs[task],
        rank=0,
        world_size=1,
        system_instruction=prompt.get("system_instruction"),
        apply_chat_template=chat,
        fewshot_as_multiturn=bool(prompt.get("fewshot_as_multiturn")),
        chat_template=lm.apply_chat_template if chat else None,
        tokenizer_name=getattr(lm, "tokenizer_name", "") if chat else "",
    )
    requests = sorted(lm_task.instances, key=lambda r: r.doc_id)
    check_requests(name, requests)
    return requests


def check_requests(name: str, requests: Sequence[Any]) -> None:
    """Refuse (one line) requests the account cannot score: not log-likelihood, several
    per document, or documents without the field protocol's canonical fields."""
    kinds = {r.request_type for r in requests}
    if kinds != {"loglikelihood"} or len({r.doc_id for r in requests}) != len(requests):
        raise InputError(
            f"depth account: {name} is scored by {sorted(kinds)} with "
            f"{len(requests)} requests; the account takes a log-likelihood task with one "
            f"request per document ({', '.join(TASKS)})"
        )
    for r in requests:
        missing = [f for f in FIELDS if f not in r.doc]
        if missing:
            raise InputError(
                f"depth account: document {r.doc_id} of {name} has no {missing[0]}: the "
                "task must declare metadata.posgen_depth (the field protocol of docs/depth.md)"
            )


def form_values(lm: Any, requests: Sequence[Any], form: str, seed: int) -> list[tuple[float, bool]]:
    """``(log-likelihood, is greedy)`` per request under ``logits=form`` in every layer
    (``plain``: none), through the model's own ``loglikelihood``."""
    lm.set_perturbation(None, None, seed, logits=None if form == "plain" else form)
    try:
        return [(float(ll), bool(g)) for ll, g in lm.loglikelihood(requests, disable_tqdm=True)]
    finally:
        lm.set_perturbation(None, None, seed)


@dataclass(frozen=True)
class RequestSpans:
    """One request's forward: ``ids`` (context and continuation, the last token dropped,
    as HFLM scores them), the question's query rows and the evidence's key columns."""

    ids: list[int]
    question: tuple[int, int]
    evidence: tuple[int, int]


def request_spans(lm: Any, request: Any) -> RequestSpans:
    """The tokens and blocks of one log-likelihood request (module doc)."""
    context, continuation = request.args
    context_enc, continuation_enc = lm._encode_pair(context, continuation)
    whole = list(context_enc) + list(continuation_enc)
    if len(whole) - 1 > lm.max_length:
        raise InputError(
            f"depth account: document {request.doc_id} has {len(whole) - 1} tokens, past the "
            f"model's max_length {lm.max_length}; use fewer passages"
        )
    try:
        blocks = context_blocks(lm.tokenizer, context.rstrip(), context_enc, request.doc)
    except PerturbationError as e:
        raise InputError(f"depth account: {e}") from None
    b, e = blocks.bounds, blocks.evidence
    return RequestSpans(whole[:-1], (b[-1], len(context_enc)), (b[e], b[e + 1]))


def block_mass(logits: torch.Tensor, rows: tuple[int, int], cols: tuple[int, int]) -> torch.Tensor:
    """[P] float64: the softmax mass the query rows ``rows`` of ``logits`` [P, m, m] put
    on the key columns ``cols``, averaged over the rows (masked entries already at −inf
    or the dtype's minimum)."""
    import torch

    probs = torch.softmax(logits[:, rows[0] : rows[1]].double(), dim=-1)
    return probs[..., cols[0] : cols[1]].sum(-1).mean(-1)


def layer_masses(cap: Any, spans: RequestSpans, layouts: LayoutCache) -> dict[str, Any]:
    """Per mass form (:data:`MASS_FORMS`) the [H] masses of one captured layer (module doc):
    the measured softmax of its logits and the softmax of each form of their exact fit
    over the entries it attends (the fit ``logits=`` makes of the same forward)."""
    import torch

    w = cap.logits[0]  # [H, m, m] float32, as the model scores them
    attended = cap.attended[0, 0]  # [m, m] bool
    options = FitOptions()
    layout = fit_layout(layouts, options.apply(attended), options)
    fits = fit_sums(head_sums(w, layout), layout)
    rows, cols = spans.question, spans.evidence
    out = {"measured": block_mass(w.masked_fill(~attended, -torch.inf), rows, cols)}
    for form in FIT_FORMS:
        x = reversed_form_logits(LogitForm(form), fits.a, fits.b, fits.c, torch.empty_like(w))
        out[form] = block_mass(x.flip(1), rows, cols)
    return out


def request_masses(lm: Any, spans: RequestSpans) -> list[dict[str, Any]]:
    """One row per (layer, head) of the masses of one request's plain forward."""
    model = lm.model
    family = family_of(model)
    if family.logits_refused:
        raise InputError(f"depth account: {family.logits_refused}")
    capture = alibi_capture_forward if family.kind == "alibi" else capture_forward
    layouts, rows = LayoutCache(), []

    def consume(cap) -> None:
        masses = layer_masses(cap, spans, layouts)
        for head in range(len(masses["measured"])):
            rows.append({"layer": cap.layer, "head": head,
                         **{f: float(masses[f][head]) for f in MASS_FORMS}})  # fmt: skip

    capture(model, spans.ids, consume)  # its own door: the plain forward
    return rows


def task_account(
    lm: Any, task: str, spec: AccountSpec, task_manager, progress: Callable[[str], None]
) -> tuple[list[dict], list[dict]]:
    """``(values, masses)`` rows of one task at every depth of ``spec`` (module doc)."""
    values, masses = [], []
    for depth in spec.depths:
        requests = depth_requests(lm, task, depth, spec, task_manager)
        ids = {"task": task, "depth": float(depth)}
        for form in LOGIT_FORMS:
            progress(f"{task} depth {depth:g} logits={form}")
            got = form_values(lm, requests, form, spec.seed)
            for r, (ll, greedy) in zip(requests, got, strict=True):
                values.append({**ids, "doc_key": str(r.doc_id), "form": form, "ll": ll,
                               "greedy": greedy})  # fmt: skip
        progress(f"{task} depth {depth:g} attention mass")
        for r in requests:
            spans = request_spans(lm, r)
            where = {**ids, "doc_key": str(r.doc_id), "tokens": len(spans.ids),
                     "question_tokens": spans.question[1] - spans.question[0],
                     "evidence_start": spans.evidence[0],
                     "evidence_tokens": spans.evidence[1] - spans.evidence[0]}  # fmt: skip
            masses += [{**where, **row} for row in request_masses(lm, spans)]
    return values, masses


def depth_account(
    lm: Any,
    spec: AccountSpec,
    task_manager,
    label: str,
    random_init: bool,
    progress: Callable[[str], None] = lambda _: None,
) -> tuple[pd.DataFrame, pd.DataFrame]:
    """The account of a loaded ``hf-posgen`` model (``lm``) on ``spec``: ``(values,
    masses)`` frames. ``values``: model, random_init, task, depth, doc_key, form
    (:data:`LOGIT_FORMS`), ll, greedy. ``masses``: model, random_init, task, depth,
    doc_key, tokens, question_tokens, evidence_start, evidence_tokens, layer, head and one
    column per :data:`MASS_FORMS`."""
    import pandas as pd

    values, masses = [], []
    for task in spec.tasks:
        v, m = task_account(lm, task, spec, task_manager, progress)
        values += v
        masses += m
    head = {"model": label, "random_init": bool(random_init)}
    frames = [pd.DataFrame([{**head, **r} for r in rows]) for rows in (values, masses)]
    return frames[0], frames[1]
