"""``hf-posgen``: lm-eval's ``hf`` model with position and feature perturbations.

Usage (any lm-eval task; every ``hf`` model argument is accepted)::

    lm_eval --model hf-posgen \\
        --model_args pretrained=PATH,positions=swap:0.05,features=rope_noise:0.5,perturb_seed=1 \\
        --tasks TASK

``pretrained`` may also be posgen's embedded model alias (``embedded``). Every forward
of the model runs inside the one door, :func:`posgen.harness.model_side.door.forward`:
:meth:`HFPosgenLM._model_call` with its batch's plan, :meth:`HFPosgenLM._model_generate`
through :func:`.generation.generating`, plain forwards with no perturbation; hooks live
inside it and are always removed (the pattern of lm-eval's ``hf_steered``; the rooms of
:mod:`posgen.harness.model_side`). Plans are drawn from each row's real tokens only: HFLM
right-pads its loglikelihood batches, and the real length of every row (and the
documents it belongs to, for a plan observer) is recorded where HFLM pads it
(:mod:`.loglikelihood_rows`, :mod:`.batch_rows`).

A ``loglikelihood`` request perturbs its context only, keyed on the context tokens alone:
every answer choice of a document sees the same perturbed context, and the continuation
keeps its positions in order after it, as text perturbations never touch choices or
targets. The context is what remains before the continuation after HFLM's truncation
from the left. ``loglikelihood_rolling`` perturbs each whole window.

``generate_until`` perturbs the context exactly as a ``loglikelihood`` request with the
same context tokens, and the k-th generated token of a context of n tokens is at position
n + k, its natural place after the context (``shift``/``scale`` move it with the frame);
the context's perturbed keys hold at every decode step (:mod:`.generation`). Λ attention
(``length=lambda``) is refused for generation.

Under a chat template (lm-eval's ``--apply_chat_template``) only the content of the
context is perturbed: the messages' contents the model rendered, never the template's
own tokens, which keep their positions (:mod:`.chat_content`).

The model-side spec and seed are part of the results (``config.posgen``) and of every
``--use_cache`` key, so a cached answer is never served under another perturbation
(:mod:`.response_cache`). Launch ranks: :mod:`posgen.harness.launch`; hf-posgen's own arguments,
checked before weights load and on the model: :mod:`.model_arguments` (what is read from
the config: :mod:`.pretrained_config`). lm-eval finds the class by name through
:mod:`posgen.lm_eval_plugin`.
"""

from __future__ import annotations

import inspect
from typing import Any

import torch
from lm_eval.api.model import CacheHook
from lm_eval.models.huggingface import HFLM

from posgen.harness.hf_posgen.chat_content import ChatContents
from posgen.harness.hf_posgen.depth_rows import DepthRequests
from posgen.harness.hf_posgen.generation import check_generation, generating, plan_generation
from posgen.harness.hf_posgen.generation_rows import GenerationRows
from posgen.harness.hf_posgen.loglikelihood_rows import LoglikelihoodRows
from posgen.harness.hf_posgen.model_arguments import (
    checked_arguments,
    checked_before_load,
    checked_on_model,
    hold_max_length,
)
from posgen.harness.hf_posgen.pretrained_config import length_load_kwargs
from posgen.harness.hf_posgen.response_cache import ResponseCache
from posgen.harness.launch import join_launch, launch_accelerator
from posgen.harness.loading.identity import folder_record
from posgen.harness.model_side import door
from posgen.harness.model_side.logits.forms import LogitDonor, LogitForm
from posgen.harness.model_side.perturbation import ModelPerturbation
from posgen.harness.model_side.prefix_reuse import PrefixReuse
from posgen.perturbations.base import Perturbation
from posgen.perturbations.seeding import DEFAULT_SEED


class HFPosgenLM(HFLM):
    """HFLM whose forward passes run under a position and/or feature perturbation.

    The named parameters of the constructor after ``pretrained`` are hf-posgen's model
    arguments, the one declaration of them (:func:`model_arguments`); every other
    argument is ``hf``'s."""

    def __init__(
        self,
        pretrained: Any,
        positions: str | None = None,
        features: str | None = None,
        perturb_seed: int = DEFAULT_SEED,
        length: str | None = None,
        layers: str | None = None,
        heads: str | None = None,
        logits: str | None = None,
        **kwargs: Any,
    ) -> None:
        """Same arguments as lm-eval's ``hf`` model plus ``positions``, ``features``,
        ``perturb_seed`` (an integer in [0, 2**32)), ``length`` (a length scheme; write
        ``lambda:G:W`` and ``infllm:KEY=VALUE:...`` in ``--model_args``, which splits at
        commas), ``layers`` (the decoder layers the position and feature schemes act in:
        ``12``, ``0-5``, ``3;7;11``; default all), ``heads`` (query heads within those
        layers, same forms; default all) and ``logits`` (``additive``, ``distance``,
        ``key``, ``shuffled``: those heads' logits replaced by their exact additive fit or
        part of it, :mod:`posgen.harness.model_side.logits.forms`; ``foreign`` needs a
        donor, :attr:`logit_donor`, set with :meth:`set_perturbation`). Generation perturbs
        the context as a log-likelihood request does; the k-th generated token of an
        n-token context is at n + k. Specs are checked before any weights load
        (:mod:`.model_arguments`); rope scalings (``dynamic:F``, ``yarn:F``) are passed to
        ``from_pretrained``."""
        p, length_scheme = checked_arguments(
            positions, features, perturb_seed, length, layers, heads, logits, kwargs
        )
        pretrained, length_scheme = checked_before_load(pretrained, p, length_scheme, kwargs)
        launch = launch_accelerator()  # before any weights load
        kwargs.update(length_load_kwargs(pretrained, length_scheme, kwargs))
        super().__init__(pretrained=pretrained, **kwargs)
        join_launch(self, launch)
        hold_max_length(self)
        self._response_cache = ResponseCache()
        self._depth = DepthRequests(self.tokenizer, lambda: self._perturbation.positions)
        self._rows = LoglikelihoodRows(self._depth)
        # called as plan_observer(inps, plan, docs) for every padded loglikelihood batch
        # and every generation batch (its contexts right-aligned), docs[b] the documents
        # (task name, lm-eval doc_id) row b belongs to
        self.plan_observer: Any = None
        # set by posgen layers: layers below the first perturbed one reuse the plain pass
        self.prefix_reuse: PrefixReuse | None = None
        # logits=foreign: the distance terms of another sequence's fit (posgen cause)
        self.logit_donor: LogitDonor | None = None
        self._chat = ChatContents()
        self._generation = GenerationRows(self._depth)
        self._perturbation = ModelPerturbation(seed=p.seed)
        self._length = length_scheme
        self.set_perturbation(p.positions, p.features, p.seed, p.layers, p.heads, p.logits)

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
        logits: str | LogitForm | None = None,
    ) -> ModelPerturbation:
        """Switch the model-side perturbation without reloading weights; the response-cache
        namespace follows. Raises ``PerturbationError`` for an invalid spec (or ``layers``
        past the model's last layer, ``logits=foreign`` without :attr:`logit_donor`, or what
        the model's position family cannot take) and ``NoRotaryEmbeddingError`` for a
        position or feature scheme on an unlisted model without RoPE."""
        new = ModelPerturbation.parse(positions, features, seed, layers, heads, logits)
        length, donor = getattr(self, "_length", None), getattr(self, "logit_donor", None)
        new = checked_on_model(new, length, donor, self.model, self.backend)
        self._perturbation = new
        self._response_cache.follow(new.cache_namespace())
        return new

    def set_cache_hook(self, cache_hook: CacheHook) -> None:
        """lm-eval's CachingLM keys answers on the request only: namespace its database by
        this model's perturbation so no answer crosses perturbations."""
        super().set_cache_hook(cache_hook)
        self._response_cache.attach(cache_hook, self._perturbation.cache_namespace())

    def get_model_info(self) -> dict:
        """HFLM's, with the perturbation's record (``posgen``) and a local folder's path and
        content revision (``posgen_model``, compared by ``posgen ingest``)."""
        info = {**super().get_model_info(), "posgen": self._perturbation.to_dict()}
        folder = folder_record(self.pretrained)
        return {**info, "posgen_model": folder} if folder else info

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
        with self._rows.scoring(requests, self.plan_observer is not None):
            return super().loglikelihood(requests, disable_tqdm=disable_tqdm)

    def loglikelihood_rolling(self, requests: Any, disable_tqdm: bool = False) -> Any:
        """Perplexity windows are perturbed whole (no answer to keep apart). With a plan
        observer, each window is traced to the document it was cut from."""
        with self._rows.rolling(requests, self.plan_observer is not None):
            return super().loglikelihood_rolling(requests, disable_tqdm=disable_tqdm)

    def _loglikelihood_tokens(
        self, requests: Any, disable_tqdm: bool = False, override_bs: int | None = None
    ) -> Any:
        if not self._perturbation.changes_model:
            return super()._loglikelihood_tokens(requests, disable_tqdm, override_bs)
        observed = self.plan_observer is not None
        with (
            self._rows.forwards_apart(self, requests),
            self._rows.recording(requests, observed, self._content_mask),
        ):
            return super()._loglikelihood_tokens(requests, disable_tqdm, override_bs)

    def _content_mask(self, request: Any) -> Any:
        """The content mask of a chat-templated request's context tokens (None: no chat
        template, a rolling window, or no context string: every context token counts)."""
        if self._rows.whole_rows:
            return None
        return self._chat.request_mask(self.tokenizer, request)

    def _detect_batch_size(self, requests: Any = None, pos: int = 0) -> int:
        # Probing batches (all rows full length) are not padded by HFLM; batch_size=auto:N
        # probes from inside _loglikelihood_tokens, so step out of the length queue.
        with self._rows.paused():
            return super()._detect_batch_size(requests, pos)

    def _model_call(
        self,
        inps: torch.Tensor,
        attn_mask: torch.Tensor | None = None,
        labels: torch.Tensor | None = None,
    ) -> torch.Tensor:
        if attn_mask is not None or labels is not None:
            with door.forward(self.model):
                return super()._model_call(inps, attn_mask=attn_mask, labels=labels)

        def forward() -> torch.Tensor:
            return super(HFPosgenLM, self)._model_call(inps)

        p, reuse = self._perturbation, self.prefix_reuse
        if not p.changes_model:
            with door.forward(self.model):
                return forward() if reuse is None else reuse.plain_forward(inps, forward)
        observed = self._rows.queue is not None and self.plan_observer is not None
        rows = self._rows.take(inps)
        plan = door.plan_forward(inps, p, rows)
        if observed:
            self.plan_observer(inps, plan, rows.docs)
        with door.forward(self.model, p, plan, reuse=reuse, inps=inps, donor=self.logit_donor):
            return forward()

    def generate_until(self, requests: Any, disable_tqdm: bool = False) -> Any:
        """HFLM's; under a perturbation the context is perturbed as a log-likelihood
        request's and generated tokens continue at natural positions (:mod:`.generation`)."""
        if self._perturbation.changes_model:
            check_generation(self._perturbation, {})
        with self._generation.running(requests, self.plan_observer is not None):
            return super().generate_until(requests, disable_tqdm=disable_tqdm)

    def tok_batch_encode(
        self,
        strings: list[str],
        padding_side: str = "left",
        left_truncate_len: int | None = None,
        truncation: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """HFLM's, remembering the strings of a batch (and under a chat template their
        whole tokens) for the generation that follows."""
        encoded = super().tok_batch_encode(strings, padding_side, left_truncate_len, truncation)
        if self._perturbation.changes_model:
            whole = None
            if self._chat.active or self._depth.active:
                whole = [
                    super(HFPosgenLM, self).tok_batch_encode([s])[0][0].tolist() for s in strings
                ]
            self._generation.record(strings, encoded[0], whole)
        return encoded

    def _model_generate(
        self, context: torch.Tensor, max_length: int, stop: list[str], **generation_kwargs: Any
    ) -> torch.Tensor:
        p = self._perturbation
        if not p.changes_model:
            with door.forward(self.model):
                return super()._model_generate(context, max_length, stop, **generation_kwargs)
        check_generation(p, generation_kwargs)
        observed = self.plan_observer is not None
        strings, whole, blocks = (None, None, None)
        if self._chat.active or observed or self._depth.active:
            strings, whole, blocks = self._generation.take(context)
        content = self._chat.generation_masks(self.tokenizer, strings, whole)
        mask = generation_kwargs.get("attention_mask")
        plan = plan_generation(p, context, mask, max_length, content, whole, blocks)
        if observed:
            self.plan_observer(*plan.context_rows(), self._generation.docs(strings))
        with generating(self.model, plan):
            return super()._model_generate(context, max_length, stop, **generation_kwargs)


def model_arguments() -> tuple[str, ...]:
    """The model arguments hf-posgen adds to lm-eval's ``hf`` model (``--model_args``): the
    named parameters of :class:`HFPosgenLM`'s constructor after ``pretrained``, which is
    where lm-eval hands them (``create_from_arg_string`` calls ``cls(**args)``)."""
    params = inspect.signature(HFPosgenLM.__init__).parameters.values()
    named = (p.name for p in params if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD)
    return tuple(name for name in named if name not in ("self", "pretrained"))
