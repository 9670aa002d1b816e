"""The position families' transformers internals (posgen.compat.position_families)."""

from __future__ import annotations

import posgen.compat as compat
from posgen.compat import position_families


def test_every_position_family_internal_is_as_the_hooks_expect():
    assert position_families.position_family_problems() == []
    assert not [m for m in compat.check() if "bloom" in m or "opt" in m]


def test_check_reports_a_family_internal_that_changed(monkeypatch):
    internals = dict(position_families.POSITION_FAMILY_INTERNALS)
    internals["transformers.models.bloom.modeling_bloom:BloomBlock.forward"] = (("self",), "bias")
    internals["transformers.models.bloom.modeling_bloom:gone"] = ((), "")
    monkeypatch.setattr(position_families, "POSITION_FAMILY_INTERNALS", internals)
    problems = compat.check()
    assert any("BloomBlock.forward" in p and "bias=" in p for p in problems)
    assert any("modeling_bloom:gone" in p for p in problems)
