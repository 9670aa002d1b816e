"""The batch plan: one interface for every model-side scheme (unit tier, no model)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from posgen.harness.model_side.positions.plan import build_plan
from posgen.perturbations import parse

IDS = torch.tensor([[5, 6, 7, 8, 9, 10, 0], [5, 6, 7, 8, 11, 12, 13]])


def test_the_plan_adds_the_offsets_of_every_positions_scheme():
    shuffle, noise = parse("position", "shuffle"), parse("feature", "rope_noise:0.5")
    plan = build_plan(IDS, [6, 7], [shuffle, noise], 3, spans=[4, 4])
    for b, n in ((0, 6), (1, 7)):
        row = IDS[b, :n].numpy()
        expected = shuffle.row_values(row, 4, 3) + noise.draw(row, 4, 3)
        np.testing.assert_allclose(plan.positions[b, :n].numpy(), expected, rtol=1e-6)
        assert torch.equal(plan.positions[b, 4:n], torch.arange(4, n, dtype=torch.float32))
    assert torch.equal(plan.positions[0, :4], plan.positions[1, :4])  # same context
    assert plan.positions.dtype == torch.float32 and plan.qk == ()


def test_integer_positions_stay_integer_and_qk_schemes_are_kept_for_attention():
    qk = parse("feature", "qk_noise:0.1")
    plan = build_plan(IDS, [6, 7], [parse("position", "shift:3"), qk], 3)
    assert plan.positions.dtype == torch.int64 and plan.qk == (qk,)
    assert torch.equal(plan.positions[1], torch.arange(7) + 3)
    identity = build_plan(IDS, [6, 7], [parse("position", "swap:0"), None], 3)
    assert identity.positions is None and identity.qk == ()


def test_spans_must_fit_the_rows():
    with pytest.raises(ValueError, match="spans"):
        build_plan(IDS, [6, 7], [parse("position", "shuffle")], 3, spans=[7, 4])
