"""A hub model resolves to its commit: from the hub, else from the local cache."""

from __future__ import annotations

import pytest

from posgen.harness.loading.hub import HubModelError, resolve_commit

SHA = "0123456789abcdef0123456789abcdef01234567"  # tests/harness/conftest.HUB_SHA


def test_a_cached_model_resolves_to_its_commit_not_main(offline_cache):
    assert resolve_commit("org/tiny") == SHA


def test_an_unknown_model_is_refused_with_what_to_do(offline_cache):
    with pytest.raises(HubModelError, match=r"not in the local cache.*pass a local folder"):
        resolve_commit("org/other")
