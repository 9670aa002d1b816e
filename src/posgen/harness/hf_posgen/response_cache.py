"""hf-posgen's answers in lm-eval's response cache (``--use_cache``), one namespace per
model-side perturbation.

lm-eval's ``CachingLM`` keys an answer on the request only; its database is handed to
the model with ``set_cache_hook``. :class:`ResponseCache` keeps that database and
prefixes every key with the current perturbation's namespace
(:meth:`ModelPerturbation.cache_namespace`, '' when nothing is set, so unperturbed
answers equal plain ``hf``'s), through :func:`posgen.compat.namespace_response_cache`.
"""

from __future__ import annotations

from typing import Any

from posgen.compat import namespace_response_cache


class ResponseCache:
    """The response-cache database of one model, once lm-eval hands it over."""

    def __init__(self) -> None:
        self.db: Any = None

    def attach(self, cache_hook: Any, namespace: str) -> None:
        """Take ``cache_hook``'s database (if it has one) and namespace it."""
        db = getattr(cache_hook, "dbdict", None)
        if db is not None:
            namespace_response_cache(db, namespace)
            self.db = db

    def follow(self, namespace: str) -> None:
        """The perturbation changed: keys carry ``namespace`` from now on."""
        if self.db is not None:
            namespace_response_cache(self.db, namespace)
