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
length of every row is recorded where HFLM pads it.

The model-side spec and seed are part of the results (``config.posgen``) and of every
``--use_cache`` key, so a cached answer is never served under another perturbation.
"""

from __future__ import annotations

import hashlib
import json
from collections import deque
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from typing import Any

import torch
from lm_eval.api.model import CacheHook
from lm_eval.models import huggingface as _hf
from lm_eval.models.huggingface import HFLM

from posgen.harness.embedded import resolve_pretrained
from posgen.harness.hf_posgen import qk_noise
from posgen.harness.hf_posgen.position_hooks import build_plan, require_rotary, rotary_positions
from posgen.perturbations.base import Perturbation, PerturbationError, registry
from posgen.perturbations.features import FeaturePerturbation
from posgen.perturbations.positions import PositionPerturbation

MODEL_NAME = "hf-posgen"
DEFAULT_SEED = 1234


def parse_spec(kind: str, value: str | Perturbation | None) -> Perturbation | None:
    """``positions=``/``features=`` value -> perturbation (None for ``None``/``''``/``none``).

    Errors name the accepted forms, e.g. ``swap:RATE, shift:OFFSET, ...``.
    """
    if value is None or (isinstance(value, str) and value.strip().lower() in ("", "none")):
        return None
    if isinstance(value, Perturbation):
        if value.kind != kind:
            raise PerturbationError(f"expected a {kind} perturbation, got {value.kind} {value}")
        return value
    try:
        return registry.parse(kind, str(value))
    except PerturbationError as exc:  # its message lists the accepted forms
        arg = "positions" if kind == "position" else "features"
        raise PerturbationError(f"{arg}={value}: {exc}") from None


@dataclass(frozen=True)
class ModelPerturbation:
    """The model-side perturbation of one run: position scheme, feature scheme, seed."""

    positions: PositionPerturbation | None = None
    features: FeaturePerturbation | None = None
    seed: int = DEFAULT_SEED

    @classmethod
    def parse(
        cls,
        positions: str | Perturbation | None,
        features: str | Perturbation | None,
        seed: int | str | None,
    ) -> ModelPerturbation:
        seed = DEFAULT_SEED if seed is None else seed
        if isinstance(seed, bool) or not str(seed).lstrip("-").isdigit():
            raise PerturbationError(f"perturb_seed must be an int, got {seed!r}")
        return cls(
            parse_spec("position", positions),
            parse_spec("feature", features),  # type: ignore[arg-type]
            int(seed),
        )

    @property
    def is_set(self) -> bool:
        """A position or feature scheme was given (even an identity one)."""
        return self.positions is not None or self.features is not None

    @property
    def changes_model(self) -> bool:
        """Some scheme would change the forward (identity schemes do not)."""
        return any(p is not None and not p.is_identity for p in (self.positions, self.features))

    def to_dict(self) -> dict[str, Any]:
        """JSON-able record for results: full specs, short forms and seed."""
        return {
            "positions": None if self.positions is None else self.positions.spec.to_dict(),
            "features": None if self.features is None else self.features.spec.to_dict(),
            "positions_str": None if self.positions is None else self.positions.to_string(),
            "features_str": None if self.features is None else self.features.to_string(),
            "perturb_seed": self.seed,
        }

    def cache_namespace(self) -> str:
        """'' when nothing is set (answers equal plain ``hf``), else a digest of the specs
        and seed that prefixes every response-cache key."""
        if not self.is_set:
            return ""
        body = json.dumps(self.to_dict(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(body.encode("utf-8")).hexdigest()[:32]


class HFPosgenLM(HFLM):
    """HFLM whose forward passes run under a position and/or feature perturbation."""

    def __init__(
        self,
        pretrained: Any,
        positions: str | None = None,
        features: str | None = None,
        perturb_seed: int = DEFAULT_SEED,
        **kwargs: Any,
    ) -> None:
        """Same arguments as lm-eval's ``hf`` model plus ``positions``, ``features`` and
        ``perturb_seed``. Specs are checked before any weights load."""
        perturbation = ModelPerturbation.parse(positions, features, perturb_seed)
        if isinstance(pretrained, str):
            pretrained = resolve_pretrained(pretrained)
        super().__init__(pretrained=pretrained, **kwargs)
        self._cache_db: Any = None
        self._row_lengths: deque[list[int]] | None = None
        self._perturbation = ModelPerturbation(seed=perturbation.seed)
        self.set_perturbation(perturbation.positions, perturbation.features, perturbation.seed)

    @property
    def perturbation(self) -> ModelPerturbation:
        return self._perturbation

    def set_perturbation(
        self,
        positions: str | Perturbation | None = None,
        features: str | Perturbation | None = None,
        seed: int = DEFAULT_SEED,
    ) -> ModelPerturbation:
        """Switch the model-side perturbation without reloading weights.

        The response-cache namespace follows the switch. Raises ``PerturbationError`` for an
        invalid spec and ``NoRotaryEmbeddingError`` for a model without RoPE.
        """
        new = ModelPerturbation.parse(positions, features, seed)
        if new.is_set:
            if self.backend != "causal":
                raise PerturbationError("positions=/features= need a causal (decoder-only) model")
            what = " and ".join(
                f"{k}={v}"
                for k, v in (("positions", new.positions), ("features", new.features))
                if v is not None
            )
            require_rotary(self.model, what)
        self._perturbation = new
        if self._cache_db is not None:
            _namespace_cache(self._cache_db, new.cache_namespace())
        return new

    def set_cache_hook(self, cache_hook: CacheHook) -> None:
        """lm-eval's CachingLM keys answers on the request only: namespace its database by
        this model's perturbation so no answer crosses perturbations."""
        super().set_cache_hook(cache_hook)
        db = getattr(cache_hook, "dbdict", None)
        if db is not None:
            _namespace_cache(db, self._perturbation.cache_namespace())
            self._cache_db = db

    def get_model_info(self) -> dict:
        info = super().get_model_info()
        info["posgen"] = self._perturbation.to_dict()
        return info

    def _loglikelihood_tokens(
        self, requests: Any, disable_tqdm: bool = False, override_bs: int | None = None
    ) -> Any:
        if not self._perturbation.changes_model:
            return super()._loglikelihood_tokens(requests, disable_tqdm, override_bs)
        with _recording_row_lengths() as queue:
            self._row_lengths = queue
            try:
                return super()._loglikelihood_tokens(requests, disable_tqdm, override_bs)
            finally:
                self._row_lengths = None

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
        if not p.changes_model or attn_mask is not None or labels is not None:
            return super()._model_call(inps, attn_mask=attn_mask, labels=labels)
        plan = build_plan(inps, self._take_row_lengths(inps), p.positions, p.features, p.seed)
        with ExitStack() as stack:
            if plan.positions is not None:
                stack.enter_context(rotary_positions(self.model, plan.positions))
            if plan.qk_noise is not None:
                stack.enter_context(qk_noise.qk_noise_active(self.model, plan))
            return super()._model_call(inps)

    def _take_row_lengths(self, inps: torch.Tensor) -> list[int]:
        """Real lengths of the rows of a right-padded batch, as HFLM padded it; a call
        from outside ``_loglikelihood_tokens`` (batch-size detection) is unpadded."""
        batch, width = inps.shape
        if self._row_lengths is None:
            return [width] * batch
        if not self._row_lengths:
            raise RuntimeError(
                "hf-posgen could not see how HFLM padded this batch (lm-eval "
                "changed its padding code?); refusing to guess the real tokens"
            )
        lengths = self._row_lengths.popleft()
        if (
            len(lengths) != batch
            or max(lengths) != width
            or any(bool(inps[b, n:].any()) for b, n in enumerate(lengths))
        ):
            raise RuntimeError(
                f"recorded row lengths {lengths} do not match the padded batch "
                f"of shape {tuple(inps.shape)}"
            )
        return lengths

    def generate_until(self, requests: Any, disable_tqdm: bool = False) -> Any:
        if self._perturbation.is_set:
            raise NotImplementedError(
                "hf-posgen does not run generate_until under positions=/features=: "
                "transformers' generate() continues positions from the last prompt position "
                "with a KV cache, so the perturbation would not hold step by step. Use "
                "loglikelihood/perplexity tasks, or drop positions=/features= for generation."
            )
        return super().generate_until(requests, disable_tqdm=disable_tqdm)


@contextmanager
def _recording_row_lengths() -> Iterator[deque[list[int]]]:
    """Within the block, every batch HFLM pads with ``pad_and_concat`` leaves the real
    row lengths in the yielded queue (lm-eval 0.4.x pads loglikelihood batches there)."""
    queue: deque[list[int]] = deque()
    original = _hf.pad_and_concat

    def recording(max_length: int, tensors: list[torch.Tensor], *args: Any, **kwargs: Any):
        queue.append([int(t.shape[-1]) for t in tensors])
        return original(max_length, tensors, *args, **kwargs)

    _hf.pad_and_concat = recording
    try:
        yield queue
    finally:
        _hf.pad_and_concat = original


_NAMESPACED: dict[type, type] = {}


def _namespace_cache(db: Any, namespace: str) -> None:
    """Make the SqliteDict ``db`` prefix every key with ``namespace``. The object is shared
    by lm-eval's CachingLM (lookups) and its CacheHook (stores), so both follow."""
    cls = type(db)
    if not getattr(cls, "_posgen_namespaced", False):
        if cls not in _NAMESPACED:
            _NAMESPACED[cls] = type(
                f"Namespaced{cls.__name__}",
                (cls,),
                {"_posgen_namespaced": True, **_NAMESPACED_METHODS},
            )
        db.__class__ = _NAMESPACED[cls]
    db._posgen_namespace = namespace


def _key(db: Any, key: str) -> str:
    ns = db._posgen_namespace
    return f"posgen:{ns}:{key}" if ns else key


def _method(name: str) -> Any:
    def method(self: Any, key: str, *args: Any) -> Any:
        return getattr(super(type(self), self), name)(_key(self, key), *args)

    method.__name__ = name
    return method


_NAMESPACED_METHODS = {
    n: _method(n) for n in ("__contains__", "__getitem__", "__setitem__", "__delitem__")
}


def register() -> None:
    """Register ``hf-posgen`` with lm-eval's model registry (idempotent)."""
    import lm_eval.models  # noqa: F401  (built-ins first, or `--model hf` stops resolving)
    from lm_eval.api.registry import register_model

    register_model(MODEL_NAME)(HFPosgenLM)
