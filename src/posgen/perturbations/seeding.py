"""Stable per-item random generators.

Every perturbed item gets its own generator derived from (global seed, the
perturbation's stream name, the item's key) through BLAKE2b, never Python's ``hash()``
and never global RNG state. The same inputs give the same random numbers in any
process, in any order and at any batch size.

Only ``Generator.random`` (uniform doubles from PCG64) is used downstream, and
permutations are built from it by a stable argsort, so the output does not depend on
NumPy's higher-level sampling algorithms.
"""

from __future__ import annotations

import hashlib

import numpy as np

_PERSON = b"posgen-rng-v1"

#: The perturbation seed when none is given: task names without ``_seed<S>``, hf-posgen's
#: ``perturb_seed``, ``posgen run --seed`` and ``posgen tasks``.
DEFAULT_SEED = 1234


def content_key(text: str) -> bytes:
    """The key of a text item: SHA-256 of its UTF-8 bytes (lone surrogates passed through)."""
    return hashlib.sha256(text.encode("utf-8", "surrogatepass")).digest()


def token_key(token_ids: np.ndarray | list[int]) -> bytes:
    """The key of a token sequence (real tokens only, no padding): SHA-256 of int64 LE."""
    arr = np.asarray(token_ids, dtype="<i8")
    return hashlib.sha256(arr.tobytes()).digest()


def item_rng(seed: int, stream: str, key: bytes | str) -> np.random.Generator:
    """A generator for one item: BLAKE2b(seed, stream, key) seeds a PCG64."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {seed!r}")
    if isinstance(key, str):
        key = key.encode("utf-8")
    h = hashlib.blake2b(digest_size=32, person=_PERSON)
    h.update(int(seed).to_bytes(16, "little", signed=True))
    h.update(len(stream).to_bytes(8, "little"))
    h.update(stream.encode("utf-8"))
    h.update(key)
    words = np.frombuffer(h.digest(), dtype="<u4")
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(words.tolist())))


def random_order(n: int, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random permutation of ``range(n)`` (int64), from n uniform doubles."""
    return np.argsort(rng.random(n), kind="stable").astype(np.int64)
