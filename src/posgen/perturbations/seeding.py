"""Stable per-item random generators.

Every perturbed item gets its own generator derived from (global seed, the
perturbation's stream name, the item's key) through BLAKE2b, never Python's ``hash()``
and never global RNG state. The same inputs give the same random numbers in any
process, in any order and at any batch size.

Only ``Generator.random`` (uniform doubles from PCG64) is used downstream, and
permutations are built from it by a stable argsort, so the output does not depend on
NumPy's higher-level sampling algorithms.

Gaussian noise has one source, :func:`standard_normal`: a counter-based generator
(SplitMix64 of a 64-bit :func:`stream_seed` and the element's index) that NumPy and torch
compute with the same integer arithmetic, so noise made on the model's device (qk_noise,
in every layer) has the same bits as noise made on the host (rope_noise), with no
device-dependent random stream and no copy from the host.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

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


def _digest(seed: int, stream: str, key: bytes | str) -> bytes:
    """BLAKE2b(seed, stream, key), 32 bytes."""
    if isinstance(seed, bool) or not isinstance(seed, (int, np.integer)):
        raise TypeError(f"seed must be an int, got {seed!r}")
    if isinstance(key, str):
        key = key.encode("utf-8")
    h = hashlib.blake2b(digest_size=32, person=_PERSON)
    h.update(int(seed).to_bytes(16, "little", signed=True))
    h.update(len(stream).to_bytes(8, "little"))
    h.update(stream.encode("utf-8"))
    h.update(key)
    return h.digest()


def item_rng(seed: int, stream: str, key: bytes | str) -> np.random.Generator:
    """A generator for one item: BLAKE2b(seed, stream, key) seeds a PCG64."""
    words = np.frombuffer(_digest(seed, stream, key), dtype="<u4")
    return np.random.Generator(np.random.PCG64(np.random.SeedSequence(words.tolist())))


def stream_seed(seed: int, stream: str, key: bytes | str) -> int:
    """The 64-bit seed of one item's Gaussian stream: the first 8 bytes of
    BLAKE2b(seed, stream, key), as an unsigned int."""
    return int.from_bytes(_digest(seed, stream, key)[:8], "little")


# SplitMix64's increment and mixer constants, as signed int64 (the arithmetic wraps).
_GAMMA, _MIX1, _MIX2 = (
    c - (1 << 64) for c in (0x9E3779B97F4A7C15, 0xBF58476D1CE4E5B9, 0x94D049BB133111EB)
)


def _shift(x: Any, k: int) -> Any:
    """Logical right shift of int64 values (NumPy and torch shift arithmetically)."""
    return (x >> k) & ((1 << (64 - k)) - 1)


def _mix(z: Any) -> Any:
    """SplitMix64's mixer on int64 values (NumPy arrays or torch tensors)."""
    z = (z ^ _shift(z, 30)) * _MIX1
    z = (z ^ _shift(z, 27)) * _MIX2
    return z ^ _shift(z, 31)


def standard_normal(seed64: int, shape: tuple[int, ...], device: Any = None) -> Any:
    """Standard normal draws for one stream, float64, in C order of ``shape``.

    Element i hashes its counter, ``h = mix(s + (i + 1)·γ) mod 2⁶⁴`` (SplitMix64, s =
    ``seed64``), splits h into two 32-bit uniforms ``u₁ = ⌊h / 2³²⌋ · 2⁻³²`` and
    ``u₂ = (h mod 2³²) · 2⁻³²`` in [0, 1), and applies Box–Muller:
    ``z = √(−2 ln(1 − u₁)) · cos(2π u₂)`` (|z| < 6.7 by construction).

    ``device=None`` returns a NumPy array; otherwise a torch tensor made on ``device``.
    Both run the same int64 arithmetic, so the uniforms agree bit for bit and the normals
    up to the last ulp of log and cos, on any device.
    """
    n = math.prod(shape)
    seed = int(seed64) % (1 << 64)
    seed -= (1 << 64) if seed >= 1 << 63 else 0
    if device is None:
        h = _mix(seed + np.arange(1, n + 1, dtype=np.int64) * _GAMMA)
        u1, u2 = (_shift(h, 32) * 2.0**-32, (h & 0xFFFFFFFF) * 2.0**-32)
        return (np.sqrt(-2.0 * np.log1p(-u1)) * np.cos(2.0 * np.pi * u2)).reshape(shape)
    import torch

    h = _mix(seed + torch.arange(1, n + 1, dtype=torch.int64, device=device) * _GAMMA)
    u1 = _shift(h, 32).to(torch.float64) * 2.0**-32
    u2 = (h & 0xFFFFFFFF).to(torch.float64) * 2.0**-32
    return (torch.sqrt(-2.0 * torch.log1p(-u1)) * torch.cos(2.0 * math.pi * u2)).reshape(shape)


def random_order(n: int, rng: np.random.Generator) -> np.ndarray:
    """A uniformly random permutation of ``range(n)`` (int64), from n uniform doubles."""
    return np.argsort(rng.random(n), kind="stable").astype(np.int64)
