"""Unit tests of the feature schemes: validation, determinism, nesting across σ."""

from __future__ import annotations

import numpy as np
import pytest

from posgen.perturbations import PerturbationError, parse, registry
from posgen.perturbations.features import QKNoise
from posgen.perturbations.model_side import WHERE, ModelSidePerturbation
from posgen.perturbations.seeding import standard_normal, stream_seed, token_key

IDS = np.arange(5, 4005, dtype=np.int64)


def test_registered_under_kind_feature():
    assert registry.names("feature") == ["qk_noise", "rope_noise"]


@pytest.mark.parametrize(
    "text",
    [
        "rope_noise:-0.1",
        "qk_noise:-1",
        "rope_noise:inf",
        "rope_noise",
        "qk_noise:x",
        "pos_noise:0.1",
    ],
)
def test_invalid_specs_are_refused(text):
    with pytest.raises(PerturbationError):
        parse("feature", text)


def test_standard_normal_moments_and_determinism():
    z = standard_normal(stream_seed(1, "s", b"k"), (200_000,))
    assert abs(z.mean()) < 0.01 and abs(z.std() - 1) < 0.01
    assert abs((z**4).mean() - 3) < 0.05  # Gaussian kurtosis
    assert np.array_equal(z, standard_normal(stream_seed(1, "s", b"k"), (200_000,)))
    assert not np.array_equal(z[:10], standard_normal(stream_seed(1, "s", b"j"), (10,)))


def test_standard_normal_is_the_same_in_numpy_and_torch():
    """One Gaussian source: host (NumPy) and device (torch) draws agree."""
    torch = pytest.importorskip("torch")
    seed = stream_seed(3, "s", b"k")
    host = standard_normal(seed, (3, 50, 8))
    made = standard_normal(seed, (3, 50, 8), device=torch.device("cpu"))
    assert made.dtype == torch.float64 and made.shape == (3, 50, 8)
    np.testing.assert_allclose(made.numpy(), host, rtol=0, atol=1e-12)
    np.testing.assert_array_equal(host.ravel()[:40], standard_normal(seed, (40,)))


@pytest.mark.parametrize("name", registry.names("position") + registry.names("feature"))
def test_model_side_schemes_share_one_interface(name):
    cls = registry.get("feature" if name in ("rope_noise", "qk_noise") else "position", name)
    assert issubclass(cls, ModelSidePerturbation) and cls.where in WHERE


def test_rope_noise_is_nested_across_sigma_and_keyed_by_content():
    small = parse("feature", "rope_noise:0.5").offsets(IDS, seed=3)
    large = parse("feature", "rope_noise:2").offsets(IDS, seed=3)
    np.testing.assert_allclose(large, 4 * small, rtol=1e-12)
    assert abs(large.std() - 2) < 0.1
    assert not np.array_equal(small, parse("feature", "rope_noise:0.5").offsets(IDS + 1, 3))
    assert not np.array_equal(small, parse("feature", "rope_noise:0.5").offsets(IDS, 4))


def test_sigma_zero_is_identity():
    for text in ("rope_noise:0", "qk_noise:0"):
        assert parse("feature", text).is_identity
    assert not parse("feature", "rope_noise:0").offsets(IDS, 1).any()


def test_qk_stream_seeds_differ_by_layer_tensor_and_content_not_sigma():
    key = token_key(IDS)
    a = QKNoise(0.1)
    seeds = {a.stream_seed(1, key, layer, t) for layer in range(4) for t in ("query", "key")}
    assert len(seeds) == 8
    assert a.stream_seed(1, key, 0, "query") == QKNoise(0.7).stream_seed(1, key, 0, "query")
    assert a.stream_seed(1, key, 0, "query") != a.stream_seed(1, token_key(IDS[1:]), 0, "query")
    with pytest.raises(ValueError):
        a.stream_seed(1, key, 0, "value")
