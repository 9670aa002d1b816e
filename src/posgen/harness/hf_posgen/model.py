"""``hf-posgen``: lm-eval's ``hf`` model with position and feature perturbations.

Usage (any lm-eval task; every ``hf`` model argument is accepted)::

    lm_eval --model hf-posgen \\
        --model_args pretrained=PATH,positions=swap:0.05,features=rope_noise:0.5,perturb_seed=1 \\
        --tasks TASK

``pretrained`` may also be posgen's embedded model alias (``embedded``). The perturbation
enters at one place, :meth:`HFPosgenLM._model_call`: hooks installed inside a context
manager and always removed (the pattern of lm-eval's ``hf_steered``). Position values
and rope noise enter inside the model's rotary embedding (:mod:`.position_hooks`), qk
noise through a registered attention function (:mod:`.qk_noise`). Both are drawn from
each row's real tokens only: HFLM right-pads its loglikelihood batches, and the real
length of every row (and the documents it belongs to, for a plan observer) is recorded
where HFLM pads it (:mod:`.batch_rows`).

A ``loglikelihood`` request perturbs its context only, keyed on the context tokens alone:
every answer choice of a document sees the same perturbed context, and the continuation
keeps its positions in order after it, as text perturbations never touch choices or
targets. The context is what remains before the continuation after HFLM's truncation
from the left. ``loglikelihood_rolling`` perturbs each whole window.

Under a chat template (lm-eval's ``--apply_chat_template``) only the content of the
context is perturbed: the messages' contents the model rendered, never the template's
own tokens, which keep their positions (:mod:`.chat_content`).

The model-side spec and seed are part of the results (``config.posgen``) and of every
``--use_cache`` key, so a cached answer is never served under another perturbation.
"""

from __future__ import annotations

import dataclasses
import os
from collections import deque
from contextlib import ExitStack
from datetime import timedelta
from typing import Any

import torch
from lm_eval.api.model import CacheHook
from lm_eval.models.huggingface import HFLM

from posgen.compat import namespace_response_cache
from posgen.harness.embedded import resolve_pretrained
from posgen.harness.hf_posgen import qk_noise
from posgen.harness.hf_posgen.batch_rows import (
    NO_DOCS,
    DocId,
    PaddedRows,
    docs_by_arguments,
    docs_by_row,
    recording_rows,
    recording_window_docs,
    row_key,
)
from posgen.harness.hf_posgen.chat_content import ChatContents
from posgen.harness.hf_posgen.lambda_attention import lambda_attention
from posgen.harness.hf_posgen.layer_hooks import layer_count, layer_positions
from posgen.harness.hf_posgen.layer_selection import check_heads, check_layers
from posgen.harness.hf_posgen.model_perturbation import ModelPerturbation
from posgen.harness.hf_posgen.position_hooks import build_plan, rotary_positions
from posgen.harness.hf_posgen.prefix_reuse import PrefixReuse
from posgen.harness.model_family import require_rotary
from posgen.perturbations.base import Perturbation, PerturbationError
from posgen.perturbations.length import (
    LengthPerturbation,
    combined_positions,
    parse_length,
)
from posgen.perturbations.seeding import DEFAULT_SEED

MODEL_NAME = "hf-posgen"


class HFPosgenLM(HFLM):
    """HFLM whose forward passes run under a position and/or feature perturbation."""

    def __init__(
        self,
        pretrained: Any,
        positions: str | None = None,
        features: str | None = None,
        perturb_seed: int = DEFAULT_SEED,
        length: str | None = None,
        layers: str | None = None,
        heads: str | None = None,
        **kwargs: Any,
    ) -> None:
        """Same arguments as lm-eval's ``hf`` model plus ``positions``, ``features``,
        ``perturb_seed``, ``length`` (a length scheme; write ``lambda:G:W`` in
        ``--model_args``, which splits at commas) and ``layers`` (the decoder layers the
        position and feature schemes act in: ``12``, ``0-5``, ``3;7;11``; default all) and
        ``heads`` (query heads within those layers, same forms; default all).
        Specs are checked before any weights load; rope scalings (``dynamic:F``,
        ``yarn:F``) are passed to ``from_pretrained``."""
        perturbation = ModelPerturbation.parse(positions, features, perturb_seed, layers, heads)
        length_scheme = _parse_length_arg(length)
        if perturbation.layers is not None and length_scheme is not None:
            raise PerturbationError("layers= restricts positions=/features=; drop length=")
        if isinstance(pretrained, str):
            pretrained = resolve_pretrained(pretrained)
            _check_layers_in_config(pretrained, perturbation, kwargs)
        launch = _launch_accelerator()  # before any weights load
        kwargs.update(_length_load_kwargs(pretrained, length_scheme, kwargs))
        super().__init__(pretrained=pretrained, **kwargs)
        self._join_launch(launch)
        self._cache_db: Any = None
        self._row_lengths: deque[PaddedRows] | None = None
        self._whole_rows = False
        # the documents of the requests being scored, while an observer is set
        self._docs_by_arguments: dict[tuple, frozenset[DocId]] = {}
        self._docs_by_window: dict[tuple[int, ...], frozenset[DocId]] = {}
        # called as plan_observer(inps, plan, docs) for every padded loglikelihood batch,
        # docs[b] the documents (task name, lm-eval doc_id) row b belongs to
        self.plan_observer: Any = None
        # set by posgen layers: layers below the first perturbed one reuse the plain pass
        self.prefix_reuse: PrefixReuse | None = None
        self._chat = ChatContents()
        self._perturbation = ModelPerturbation(seed=perturbation.seed)
        self._length = length_scheme
        p = perturbation
        self.set_perturbation(p.positions, p.features, p.seed, p.layers, p.heads)

    def _join_launch(self, launch: Any) -> None:
        """Rank and world size of an ``accelerate launch``/``torchrun`` launch. HFLM takes
        them from its accelerator only when it counts more than one GPU (on CPU every
        process stays rank 0 of 1 and scores every document) and never for a built model."""
        accelerator = getattr(self, "accelerator", None) or launch
        if accelerator is not None and accelerator.num_processes > 1:
            self.accelerator = accelerator
            self._rank = accelerator.process_index
            self._world_size = accelerator.num_processes

    @property
    def perturbation(self) -> ModelPerturbation:
        return self._perturbation

    def set_perturbation(
        self,
        positions: str | Perturbation | None = None,
        features: str | Perturbation | None = None,
        seed: int = DEFAULT_SEED,
        layers: str | int | tuple[int, ...] | None = None,
        heads: str | int | tuple[int, ...] | None = None,
    ) -> ModelPerturbation:
        """Switch the model-side perturbation without reloading weights.

        The response-cache namespace follows the switch. Raises ``PerturbationError`` for an
        invalid spec (or ``layers`` past the model's last layer) and
        ``NoRotaryEmbeddingError`` for a model without RoPE.
        """
        new = ModelPerturbation.parse(positions, features, seed, layers, heads)
        new = dataclasses.replace(new, length=getattr(self, "_length", None))
        if new.layers is not None and new.length is not None:
            raise PerturbationError("layers= restricts positions=/features=; drop length=")
        if new.is_set:
            if self.backend != "causal":
                raise PerturbationError("positions=/features= need a causal (decoder-only) model")
            what = " and ".join(
                f"{k}={v}"
                for k, v in (("positions", new.positions), ("features", new.features))
                if v is not None
            )
            require_rotary(self.model, what)
            check_layers(new.layers, layer_count(self.model))
            check_heads(new.heads, self.model.config.get_text_config().num_attention_heads)
        self._perturbation = new
        if self._cache_db is not None:
            namespace_response_cache(self._cache_db, new.cache_namespace())
        return new

    def set_cache_hook(self, cache_hook: CacheHook) -> None:
        """lm-eval's CachingLM keys answers on the request only: namespace its database by
        this model's perturbation so no answer crosses perturbations."""
        super().set_cache_hook(cache_hook)
        db = getattr(cache_hook, "dbdict", None)
        if db is not None:
            namespace_response_cache(db, self._perturbation.cache_namespace())
            self._cache_db = db

    def get_model_info(self) -> dict:
        info = super().get_model_info()
        info["posgen"] = self._perturbation.to_dict()
        return info

    def chat_template(self, chat_template: bool | str = False) -> str | None:
        """HFLM's; asked for by lm-eval when a run applies a chat template."""
        if chat_template:
            self._chat.active = True
        return super().chat_template(chat_template)

    def apply_chat_template(
        self, chat_history: list[dict[str, str]], add_generation_prompt: bool = True
    ) -> str:
        """HFLM's rendering, remembering where each message's content lies in it."""
        rendered = super().apply_chat_template(chat_history, add_generation_prompt)
        self._chat.record(rendered, chat_history)
        return rendered

    def loglikelihood(self, requests: Any, disable_tqdm: bool = False) -> Any:
        """HFLM's, remembering (for the plan observer) which documents ask what."""
        if self.plan_observer is None:
            return super().loglikelihood(requests, disable_tqdm=disable_tqdm)
        self._docs_by_arguments = docs_by_arguments(requests)
        try:
            return super().loglikelihood(requests, disable_tqdm=disable_tqdm)
        finally:
            self._docs_by_arguments = {}

    def loglikelihood_rolling(self, requests: Any, disable_tqdm: bool = False) -> Any:
        """Perplexity windows are perturbed whole (no answer to keep apart). With a plan
        observer, each window is traced to the document it was cut from."""
        self._whole_rows = True
        try:
            if self.plan_observer is None:
                return super().loglikelihood_rolling(requests, disable_tqdm=disable_tqdm)
            with recording_window_docs(list(requests)) as windows:
                self._docs_by_window = windows
                return super().loglikelihood_rolling(requests, disable_tqdm=disable_tqdm)
        finally:
            self._whole_rows = False
            self._docs_by_window = {}

    def _loglikelihood_tokens(
        self, requests: Any, disable_tqdm: bool = False, override_bs: int | None = None
    ) -> Any:
        if not self._perturbation.changes_model:
            return super()._loglikelihood_tokens(requests, disable_tqdm, override_bs)
        # HFLM answers requests sharing the tokens context + continuation[:-1] from one
        # forward; when their contexts end at different tokens they need their own.
        shared_logits = self.logits_cache
        if not self._whole_rows and _split_differently(requests):
            self.logits_cache = False
        rows = (
            {}
            if self.plan_observer is None
            else docs_by_row(
                requests, self._docs_by_arguments, self._docs_by_window, self._whole_rows
            )
        )
        whole = self._whole_rows
        with recording_rows(
            lambda request: rows.get(row_key(request, whole), NO_DOCS), self._content_mask
        ) as queue:
            self._row_lengths = queue
            try:
                return super()._loglikelihood_tokens(requests, disable_tqdm, override_bs)
            finally:
                self._row_lengths = None
                self.logits_cache = shared_logits

    def _content_mask(self, request: Any) -> Any:
        """The content mask of a chat-templated request's context tokens (None: no chat
        template, a rolling window, or no context string: every context token counts)."""
        strings, context_enc, _ = request
        if not self._chat.active or self._whole_rows or strings is None or not strings[0]:
            return None
        return self._chat.token_mask(self.tokenizer, strings[0], context_enc)

    def _detect_batch_size(self, requests: Any = None, pos: int = 0) -> int:
        # Probing batches (all rows full length) are not padded by HFLM; batch_size=auto:N
        # probes from inside _loglikelihood_tokens, so step out of the length queue.
        queue, self._row_lengths = self._row_lengths, None
        try:
            return super()._detect_batch_size(requests, pos)
        finally:
            self._row_lengths = queue

    def _model_call(
        self,
        inps: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> torch.Tensor:
        p = self._perturbation
        reuse = self.prefix_reuse
        if attn_mask is not None or labels is not None:
            return super()._model_call(inps, attn_mask=attn_mask, labels=labels)
        if not p.changes_model:
            if reuse is None:
                return super()._model_call(inps)
            with reuse.record(inps):
                logits = super()._model_call(inps)
            if not reuse.checked and reuse.has(inps):
                reuse.check(inps, logits, lambda: super(HFPosgenLM, self)._model_call(inps))
            return logits
        observed = self._row_lengths is not None and self.plan_observer is not None
        lengths, spans, docs, content = self._take_row_lengths(inps)
        moved = combined_positions(p.positions, p.length)
        plan = build_plan(inps, lengths, (moved, p.features), p.seed, spans, content)
        plan = dataclasses.replace(plan, layers=p.layers, heads=p.heads)
        if observed:
            self.plan_observer(inps, plan, docs)
        with ExitStack() as stack:
            if p.length is not None and p.length.uses_attention:
                stack.enter_context(lambda_attention(self.model, p.length))
            split = p.heads is not None
            if plan.positions is not None and p.layers is not None:
                positions = layer_positions(self.model, plan.positions, p.layers, split)
                stack.enter_context(positions)
            elif plan.positions is not None:
                stack.enter_context(rotary_positions(self.model, plan.positions))
            if plan.qk or split:
                stack.enter_context(qk_noise.qk_noise_active(self.model, plan))
            if reuse is not None and p.layers is not None:
                stack.enter_context(reuse.replay(inps, p.layers[0]))
            return super()._model_call(inps)

    def _take_row_lengths(self, inps: torch.Tensor) -> PaddedRows:
        """Real lengths of the rows of a right-padded batch, as HFLM padded it, how many
        leading tokens of each are perturbed (the context; the whole row when rolling) and
        the documents of each. A call from outside ``_loglikelihood_tokens`` (batch-size
        detection) is unpadded and belongs to no document."""
        batch, width = inps.shape
        if self._row_lengths is None:
            return PaddedRows([width] * batch, [width] * batch, [NO_DOCS] * batch, [None] * batch)
        if not self._row_lengths:
            raise RuntimeError(
                "hf-posgen could not see how HFLM padded this batch (lm-eval "
                "changed its padding code?); refusing to guess the real tokens"
            )
        lengths, contexts, docs, content = self._row_lengths.popleft()
        if (
            len(lengths) != batch
            or max(lengths) != width
            or any(bool(inps[b, n:].any()) for b, n in enumerate(lengths))
        ):
            raise RuntimeError(
                f"recorded row lengths {lengths} do not match the padded batch "
                f"of shape {tuple(inps.shape)}"
            )
        return PaddedRows(lengths, list(lengths) if self._whole_rows else contexts, docs, content)

    def generate_until(self, requests: Any, disable_tqdm: bool = False) -> Any:
        if self._perturbation.is_set:
            raise NotImplementedError(
                "hf-posgen does not run generate_until under positions=/features=: "
                "transformers' generate() continues positions from the last prompt position "
                "with a KV cache, so the perturbation would not hold step by step. Use "
                "loglikelihood/perplexity tasks, or drop positions=/features= for generation."
            )
        return super().generate_until(requests, disable_tqdm=disable_tqdm)


def _split_differently(requests: Any) -> bool:
    """Do two requests share the tokens ``context + continuation[:-1]`` (HFLM's
    one-forward group) but split them at different points?"""
    split_of: dict[tuple[int, ...], int] = {}
    for _, context, continuation in requests:
        tokens = tuple(context) + tuple(continuation[:-1])
        if split_of.setdefault(tokens, len(continuation)) != len(continuation):
            return True
    return False


def _launch_accelerator() -> Any:
    """The accelerator of a launch (``WORLD_SIZE > 1``), set up as lm-eval's HFLM does
    (a 52-week process-group timeout); None outside one."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return None
    from accelerate import Accelerator, InitProcessGroupKwargs

    accelerator = Accelerator(kwargs_handlers=[InitProcessGroupKwargs(timeout=timedelta(weeks=52))])
    if accelerator.num_processes <= 1:
        raise RuntimeError(
            f"WORLD_SIZE={world} but accelerate sees one process (every process would "
            "score every document); on CPU set ACCELERATE_USE_CPU=true and launch with "
            "accelerate launch --multi_gpu --num_processes N --num_machines 1"
        )
    return accelerator


def _parse_length_arg(value: str | LengthPerturbation | None) -> LengthPerturbation | None:
    if value is None or isinstance(value, LengthPerturbation):
        return value
    try:
        return parse_length(str(value))
    except PerturbationError as exc:
        raise PerturbationError(f"length={value}: {exc}") from None


def _check_layers_in_config(pretrained: str, p: ModelPerturbation, given: dict[str, Any]) -> None:
    """Refuse ``layers=``/``heads=`` past the last one from the config alone, before
    weights load."""
    if p.layers is None:
        return
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(
        pretrained, trust_remote_code=given.get("trust_remote_code", False)
    )
    text = config.get_text_config()
    if getattr(text, "num_hidden_layers", None) is not None:
        check_layers(p.layers, int(text.num_hidden_layers), pretrained)
    if getattr(text, "num_attention_heads", None) is not None:
        check_heads(p.heads, int(text.num_attention_heads))


def _length_load_kwargs(
    pretrained: Any, scheme: LengthPerturbation | None, given: dict[str, Any]
) -> dict[str, Any]:
    """``from_pretrained`` kwargs of a rope-scaling length scheme (read from the config)."""
    if scheme is None or scheme.rope_type is None:
        return {}
    if not isinstance(pretrained, str):
        raise PerturbationError(
            f"length={scheme.to_string()} is applied at load time: pass pretrained= as a path"
        )
    clash = sorted({"rope_parameters", "rope_scaling"} & set(given))
    if clash:
        raise PerturbationError(f"length={scheme.to_string()} sets the rope; drop {clash}")
    from transformers import AutoConfig

    config = AutoConfig.from_pretrained(
        pretrained, trust_remote_code=given.get("trust_remote_code", False)
    )
    return scheme.load_kwargs(config)


def register() -> None:
    """Register ``hf-posgen`` with lm-eval's model registry (idempotent)."""
    import lm_eval.models  # noqa: F401  (built-ins first, or `--model hf` stops resolving)
    from lm_eval.api.registry import register_model

    register_model(MODEL_NAME)(HFPosgenLM)
