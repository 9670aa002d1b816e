"""Fixtures of the hf-posgen tests."""

from __future__ import annotations

import pytest

from posgen.harness.model_side import door
from posgen.harness.model_side.positions.plan import build_plan


@pytest.fixture
def plans(monkeypatch) -> list:
    """Filled with ``(input_ids, plan)`` of every perturbed forward hf-posgen runs."""
    seen = []

    def spying(inps, *args, **kwargs):
        plan = build_plan(inps, *args, **kwargs)
        seen.append((inps.clone(), plan))
        return plan

    monkeypatch.setattr(door, "build_plan", spying)
    return seen
